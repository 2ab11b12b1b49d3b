#include <echelon/parallel/pipeline.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/base/thread_name.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/balance.h>
#include <echelon/parallel/process_group.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/allocator.h>
#endif

namespace echelon::parallel {

PipelineOptions PipelineOptions::single() {
  PipelineOptions options;
  options.partitions = 1;
  options.schedule = ScheduleKind::Sequential;
  options.single_device = true;
  return options;
}

void PipelineOptions::validate() const {
  ECH_CHECK(partitions >= 1, "pipeline: partitions must be >= 1, got ", partitions);
  ECH_CHECK(micro_batches >= 1, "pipeline: micro_batches must be >= 1, got ", micro_batches);
  ECH_CHECK(!(balance_auto && !ppv.empty()),
            "pipeline: explicit partition points (ppv) and balance_auto exclude each other");
  if (!ppv.empty()) parse_ppv(ppv);
  if (schedule == ScheduleKind::Hybrid) hybrid_switch_epoch();
  ECH_CHECK(!single_device || (partitions == 1 && ppv.empty() && !balance_auto),
            "pipeline: single-device training has one partition");
  ECH_CHECK(data_parallel >= 1, "pipeline: data_parallel must be >= 1, got ", data_parallel);
  ECH_CHECK(std::isfinite(bucket_mb) && bucket_mb >= 0 && bucket_mb <= kMaxBucketMb,
            "pipeline: bucket_mb must be in [0, ", kMaxBucketMb, "] MiB, got ", bucket_mb);
}

int PipelineOptions::hybrid_switch_epoch() const {
  ECH_CHECK(std::isfinite(hybrid_switch) && hybrid_switch > 0,
            "pipeline: hybrid_switch must be > 0 (an epoch, or a fraction of the epochs), got ",
            hybrid_switch);
  if (hybrid_switch >= 1) return static_cast<int>(hybrid_switch);
  ECH_CHECK(total_epochs > 0, "pipeline: hybrid_switch ", hybrid_switch,
            " is a fraction of the epochs, but the number of epochs is unknown");
  return std::max(1, static_cast<int>(std::lround(hybrid_switch * total_epochs)));
}

PipelineEngine::PipelineEngine(std::shared_ptr<Sequential> model, const SGDOptions& sgd,
                               Device device, PipelineOptions options)
    : model_(std::move(model)),
      sgd_(sgd),
      device_(device),
      options_(std::move(options)),
      current_(options_.schedule),
      lr_(sgd.lr),
      group_(options_.process_group) {
  ECH_CHECK(model_ != nullptr, "pipeline: no model");
  options_.validate();
  // The partitions cut this view; its layers are the model's own objects.
  layers_ = options_.split_blocks ? model_->with_split_blocks() : model_;
  // The partitions must fit the model: checked now, while a trainer prepares its run (before it
  // touches the run folder), not at the first batch.
  const auto layers = static_cast<int64_t>(layers_->size());
  const int planned =
      !options_.ppv.empty()
          ? static_cast<int>(ranges_from_cuts(parse_ppv(options_.ppv), layers).size())
          : static_cast<int>(even_cuts(layers, options_.partitions).size()) + 1;
  // This process's partition is known before the first batch: a later partition's trainer loads
  // no data (takes_batches). place_process checks the world's size against the agreed cuts.
  if (group_) {
    partition_ = group_->rank() % planned;
    replica_ = group_->rank() / planned;
  }
  // Checked here, not in validate(): the CLI validates its flags before it joins the processes.
  ECH_CHECK(options_.data_parallel == 1 || group_ != nullptr, "pipeline: ", options_.data_parallel,
            " data-parallel replicas need one process each (start the run with mpirun)");
  // One trace per process: rank r > 0 writes its own to PATH.rank<r>, rank 0 writes every rank's
  // merged into PATH (gather_traces, once the processes are placed).
  if (group_ && group_->rank() > 0 && !options_.trace_path.empty())
    options_.trace_path += str(".rank", group_->rank());
  if (!options_.trace_path.empty()) {
    // Created now, so the trainer and the data loader can record on its clock from the start.
    trace_ = std::make_unique<TraceRecorder>();
    trace_->set_output(options_.trace_path);  // an unwritable path fails now, not after an epoch
  }
}

PipelineEngine::~PipelineEngine() {
  close_all();
  for (std::thread& thread : threads_) thread.join();
}

std::string PipelineEngine::name() const {
  return options_.single_device ? "single" : str("pipeline:", schedule_name(options_.schedule));
}

std::vector<int64_t> PipelineEngine::choose_cuts(const Tensor& sample) {
  if (!options_.ppv.empty()) return parse_ppv(options_.ppv);
  // Distributed, rank 0 profiles alone and broadcasts its cuts (agree_on_cuts).
  if (!options_.balance_auto || (distributed() && group_->rank() != 0)) {
    return even_cuts(static_cast<int64_t>(layers_->size()), options_.partitions);
  }
  ECH_CHECK(sample.defined(), "pipeline: --balance auto profiles the first mini-batch, but epoch ",
            epochs_done_ + 1, " had none (is the training set smaller than one batch?); give ",
            "the cuts with --ppv");
  // Profiled here, before any stage stream exists, on this thread's stream; profile_layers
  // returns only once that work has finished, so the stages cannot race it.
  model_->to(device_);
  const BalanceProfile profile =
      profile_for_balance(*model_, *layers_, options_.split_blocks, sample.to(device_));
  std::vector<size_t> bytes;
  for (const LayerProfile& p : profile.layers) bytes.push_back(p.activation_bytes);
  return balance_partitions(profile.cost, options_.partitions, bytes).cuts;
}

void PipelineEngine::start(const Tensor& sample) {
  ECH_CHECK(!started(), "pipeline: already started");
  cuts_ = choose_cuts(sample);
  if (distributed()) cuts_ = agree_on_cuts(cuts_);
  const std::vector<LayerRange> ranges =
      ranges_from_cuts(cuts_, static_cast<int64_t>(layers_->size()));
  const int K = static_cast<int>(ranges.size());
  ECH_CHECK(options_.devices.empty() || static_cast<int>(options_.devices.size()) == K,
            "pipeline: ", options_.devices.size(), " devices given for ", K, " partitions");
  const std::vector<Device> devices =
      options_.devices.empty() ? std::vector<Device>(K, device_) : options_.devices;

  if (trace_) trace_->set_partitions(K);
  const std::vector<std::shared_ptr<Sequential>> parts = split_model(*layers_, cuts_);
  if (distributed()) {
    parts_ = parts;
    place_process(K);
  }
  for (int k = 0; k < K; ++k) {
    if (distributed() && k != partition_) continue;  // another process runs it
    parts[k]->to(devices[k]);
    stages_.push_back(std::make_unique<Stage>(k, K, ranges[k], parts[k], devices[k], sgd_));
  }
  if (pending_optimizer_state_) {
    load_optimizer_state(*pending_optimizer_state_);
    pending_optimizer_state_.reset();
  }
  // The sync-free step needs the driver's thread to run the partition (inline) on a GPU.
  if (deferred_interval_ > 0 && K == 1 && !distributed() && devices[0].is_cuda())
    deferred_ = std::make_unique<DeferredStats>(devices[0]);
  if (options_.cuda_graph) start_cuda_graph();
  if (distributed()) {
    connect_distributed(devices[partition_]);
  } else {
    connect(devices);
  }
  started_at_ = last_flush_at_ = std::chrono::steady_clock::now();
  // One partition has no one to overlap with: it runs inline in submit() and flush().
  inline_ = K == 1 && !distributed();
  if (inline_) return;
  for (size_t k = 0; k < stages_.size(); ++k) {
    threads_.emplace_back([s = stages_[k].get()] { s->run(); });
    // The partition's number in the whole pipeline: a process runs only its own (per-rank
    // profiles and `top -H` then tell the partitions apart).
    const size_t partition = distributed() ? static_cast<size_t>(partition_) : k;
    set_thread_name(threads_.back(), "ech-part-" + std::to_string(partition));
  }
}

void PipelineEngine::connect(const std::vector<Device>& devices) {
  const int K = static_cast<int>(devices.size());
  // Links never block in a valid schedule when they hold every mini-batch a partition may have
  // in flight; only the driver's input link is short, so that the driver waits for partition 0.
  const size_t capacity = static_cast<size_t>(std::max(K, options_.micro_batches)) + 2;
  // Inline, the driver and the partition share one thread and one stream: nothing to order.
  input_ = K == 1 ? make_local_transport(1) : make_transport(device_, devices[0], 1);
  for (int k = 0; k + 1 < K; ++k) {
    forward_links_.push_back(make_transport(devices[k], devices[k + 1], capacity));
    backward_links_.push_back(make_transport(devices[k + 1], devices[k], capacity));
  }
  // Results the driver has not collected yet: at most every message the pipeline can hold (the
  // input slot, each forward link, one in each partition's hands) plus one step's submissions.
  const size_t held = 1 + static_cast<size_t>(K - 1) * std::bit_ceil(capacity) +
                      static_cast<size_t>(K) + static_cast<size_t>(options_.micro_batches);
  results_ = std::make_unique<data::SpscRing<BatchResult>>(held);
  flushed_ = std::make_unique<data::MpmcRing<int>>(static_cast<size_t>(K));

  const StageContext context = stage_context();
  for (int k = 0; k < K; ++k) {
    StageLinks links;
    links.forward_in = k == 0 ? input_.get() : forward_links_[k - 1].get();
    links.forward_out = k + 1 < K ? forward_links_[k].get() : nullptr;
    links.backward_in = k + 1 < K ? backward_links_[k].get() : nullptr;
    links.backward_out = k > 0 ? backward_links_[k - 1].get() : nullptr;
    stages_[k]->connect(links, context);
  }
}

StageContext PipelineEngine::stage_context() {
  StageContext context;
  context.results = results_.get();
  context.flushed = flushed_.get();
  context.schedule = current_;
  context.micro_batches = options_.micro_batches;
  context.predict_weights = options_.predict_weights;
  context.fail = [this](const std::string& error) { fail(error); };
  context.trace = trace_.get();
  context.timed_ops = options_.timed_ops;
  context.deferred_stats = deferred_.get();
  return context;
}

void PipelineEngine::fail(const std::string& error) {
  {
    std::lock_guard lock(error_mutex_);
    if (error_.empty()) error_ = error;
  }
  failed_ = true;
  close_all();
}

void PipelineEngine::close_all() {
  if (input_) input_->close();
  for (auto& link : forward_links_) link->close();
  for (auto& link : backward_links_) link->close();
  if (results_) results_->close();
  if (flushed_) flushed_->close();
}

void PipelineEngine::rethrow_failure() {
  std::lock_guard lock(error_mutex_);
  ECH_FAIL("pipeline (", name(), "): ", error_.empty() ? "shut down" : error_);
}

void PipelineEngine::check_alive() {
  if (failed_) rethrow_failure();
}

void PipelineEngine::submit(Message message) {
  message.id = next_id_++;
  message.lr = lr_;
  ++unflushed_;
  if (distributed() && partition_ != 0) return;  // partition 0's process feeds the pipeline
  if (!input_->send(std::move(message))) rethrow_failure();
  // Inline, partition 0 takes every message at once, so its 1-slot input never blocks us.
  if (inline_) stages_[0]->run_inline();
}

bool PipelineEngine::flush(ScheduleKind next, bool epoch_end) {
  Message marker;
  marker.kind = Message::Kind::Flush;
  marker.schedule = next;
  marker.epoch_end = epoch_end;
  if (!distributed() || partition_ == 0) {
    if (!input_->send(std::move(marker))) rethrow_failure();
  }
  if (inline_) stages_[0]->run_inline();
  bool ended = false;
  for (size_t k = 0; k < stages_.size(); ++k) {
    const std::optional<bool> flushed = await_flushed();
    if (!flushed) rethrow_failure();
    ended = *flushed;
  }
  if (distributed()) exchange_results(/*at_flush=*/true);
  current_ = next;
  unflushed_ = 0;
  last_flush_at_ = std::chrono::steady_clock::now();
  return ended;
}

void PipelineEngine::defer_step_stats(int64_t interval) {
  ECH_CHECK(!started(), "pipeline: defer_step_stats must come before the first step");
  ECH_CHECK(interval >= 1, "pipeline: defer_step_stats needs an interval >= 1, got ", interval);
  deferred_interval_ = interval;
}

StepStats PipelineEngine::collect(bool aggregate_micro_batches, bool drain) {
  StepStats stats = carried_;
  carried_ = {};
  int64_t last_index = std::numeric_limits<int64_t>::min();
  if (!results_) return stats;
  std::vector<BatchResult> done;
  if (distributed()) {
    exchange_results(/*at_flush=*/false);
    done.swap(relayed_);
  } else {
    while (std::optional<BatchResult> result = results_->try_pop()) done.push_back(*result);
    if (deferred_ && (drain || static_cast<int64_t>(deferred_->pending()) >= deferred_interval_)) {
      for (const BatchResult& result : deferred_->read()) done.push_back(result);
    }
  }
  for (const BatchResult* result = done.data(); result != done.data() + done.size(); ++result) {
    if (options_.on_result) options_.on_result(*result);
    // A step is one mini-batch of the first replica (the others ran their shares of it).
    if (result->replica == 0 && (!aggregate_micro_batches || result->batch_index != last_index)) {
      ++stats.batches;
      last_index = result->batch_index;
    }
    stats.samples += result->samples;
    samples_done_ += result->samples;
    stats.loss_sum += result->loss * static_cast<double>(result->samples);
    stats.correct += result->correct;
    if (!result->finite && stats.finite) {
      stats.finite = false;
      stats.nonfinite_batch = result->batch_index;
    }
  }
  return stats;
}

StepStats PipelineEngine::train_step(const data::Batch& batch) {
  check_alive();
  ECH_CHECK(batch.images.defined() && batch.labels.defined() && batch.images.dim() >= 1 &&
                batch.labels.dim() == 1 && batch.images.size(0) == batch.labels.size(0),
            "pipeline: a batch needs images (N, ...) and labels (N) with the same N");
  if (!started()) start(batch.images);
  synced_ = false;
  {
    std::optional<ScopedDeferredTargetChecks> deferred_checks;
    if (deferred_) deferred_checks.emplace();
    if (graph_) {
      graph_step(batch);
    } else {
      submit_batch(batch);
    }
  }
  if (current_ != ScheduleKind::GPipe) {
    check_alive();
    return collect(false);
  }
  flush(ScheduleKind::GPipe);
  return collect(true);
}

void PipelineEngine::submit_batch(const data::Batch& global) {
  const auto [batch, share] = replica_shard(global);
  if (current_ != ScheduleKind::GPipe) {
    Message message;
    message.batch_index = batch.index;
    message.tensor = batch.images;
    message.labels = batch.labels;
    message.loss_weight = share;
    submit(std::move(message));
    return;
  }
  // GPipe: M micro-batches (sizes differ by at most one), flush, one synchronous update.
  const int64_t n = batch.images.size(0);
  const int64_t m = std::min<int64_t>(options_.micro_batches, n);
  for (int64_t i = 0, begin = 0; i < m; ++i) {
    const int64_t size = n / m + (i < n % m ? 1 : 0);
    Message message;
    message.batch_index = batch.index;
    message.tensor = batch.images.narrow(0, begin, size).contiguous();
    message.labels = batch.labels.narrow(0, begin, size).contiguous();
    message.loss_weight = share * static_cast<double>(size) / static_cast<double>(n);
    submit(std::move(message));
    begin += size;
  }
}

ScheduleKind PipelineEngine::schedule_after_epoch() const {
  if (options_.schedule == ScheduleKind::Hybrid && current_ == ScheduleKind::Hybrid &&
      epochs_done_ + 1 >= options_.hybrid_switch_epoch()) {
    return ScheduleKind::Sequential;
  }
  return current_;
}

StepStats PipelineEngine::finish_epoch() {
  check_alive();
  // An epoch without a mini-batch (a data set limit under the batch size, every sample skipped)
  // still ends: it counts for hybrid's switch, and in another process a later partition waits for
  // its epoch_end marker, so partition 0's process starts the pipeline without a batch (as those
  // processes do in follow_epoch) and sends it.
  if (!started()) {
    if (!distributed()) {
      end_epoch(schedule_after_epoch());
      return collect(false);
    }
    start(Tensor());
  }
  const ScheduleKind next = schedule_after_epoch();
  flush(next, /*epoch_end=*/true);
  end_epoch(next);
  return collect(current_ == ScheduleKind::GPipe, /*drain=*/true);
}

void PipelineEngine::end_epoch(ScheduleKind next) {
  ++epochs_done_;
  current_ = next;
  if (distributed()) {
    sync_partitions();
    gather_rank_stats();
  }
  if (trace_) trace_->save();
}

void PipelineEngine::continue_after_epochs(int epochs_done) {
  ECH_CHECK(!started(), "pipeline: continue_after_epochs must come before the first step");
  epochs_done_ = epochs_done;
  if (options_.schedule == ScheduleKind::Hybrid && epochs_done_ >= options_.hybrid_switch_epoch())
    current_ = ScheduleKind::Sequential;
}

Tensor PipelineEngine::predict(const Tensor& images) {
  check_alive();
  if (!started()) start(images);
  if (unflushed_ > 0) {
    flush(current_);
    carried_ = collect(current_ == ScheduleKind::GPipe, /*drain=*/true);
  }
  if (distributed() && !synced_) sync_partitions();
  NoGradGuard no_grad;
  const bool training = model_->is_training();
  model_->eval();
  Tensor x = images;
  try {
    if (distributed()) {
      x = model_->forward(x.to(stages_[0]->device()));  // every process holds every partition
    } else {
      for (const auto& stage : stages_) x = stage->layers().forward(x.to(stage->device()));
    }
  } catch (...) {
    model_->train(training);
    throw;
  }
  model_->train(training);
  return x;
}

StateDict PipelineEngine::optimizer_state() const {
  if (!started()) return pending_optimizer_state_.value_or(StateDict());
  if (distributed()) return merged_optimizer_state();
  StateDict merged;
  for (const auto& stage : stages_) {
    for (const auto& [key, value] : stage->optimizer().state_dict()) {
      if (key != "step" || !merged.contains("step")) merged.insert(key, value);
    }
  }
  return merged;
}

void PipelineEngine::load_optimizer_state(const StateDict& state) {
  if (!started()) {
    pending_optimizer_state_ = state;
    return;
  }
#if ECHELON_WITH_CUDA
  if (graph_) {  // the graph names the old momentum buffers: capture again later
    graph_->reset();
    graph_warmup_ = 0;
  }
#endif
  if (distributed()) {
    load_distributed_optimizer_state(state);
    return;
  }
  size_t used = 0;
  for (auto& stage : stages_) {
    StateDict part;
    if (const Tensor* step = state.find("step")) part.insert("step", *step);
    for (const auto& [name, param] : stage->optimizer().params()) {
      for (const std::string& prefix : SGD::parameter_state_prefixes()) {
        if (const Tensor* buffer = state.find(prefix + name)) {
          part.insert(prefix + name, *buffer);
          ++used;
        }
      }
    }
    stage->optimizer().load_state_dict(part);
  }
  const size_t expected = state.size() - (state.contains("step") ? 1 : 0);
  for (const std::string& key : state.keys()) {
    bool known = key == "step";
    for (auto& stage : stages_) {
      for (const auto& [name, param] : stage->optimizer().params()) {
        for (const std::string& prefix : SGD::parameter_state_prefixes())
          known = known || key == prefix + name;
      }
    }
    ECH_CHECK(known, "optimizer state: '", key, "' matches no parameter of the model");
  }
  ECH_CHECK(used == expected, "optimizer state: ", expected - used, " entries were not used");
}

std::vector<PartitionStats> PipelineEngine::partition_stats() const {
  std::vector<PartitionStats> stats;
  for (const auto& stage : stages_) stats.push_back(stage->stats());
  return stats;
}

double PipelineEngine::wall_seconds() const {
  if (!started()) return 0;
  return std::chrono::duration<double>(last_flush_at_ - started_at_).count();
}

namespace {
// One partition's entry of the report's "stages" array; `wall`: the pipeline's wall time.
json::Value partition_report(const PartitionStats& s, double wall, int64_t analytic) {
  json::Value histogram = json::Value::object();
  for (const auto& [staleness, count] : s.staleness)
    histogram.set(std::to_string(staleness), count);
  json::Value entry = json::Value::object();
  entry.set("partition", s.partition)
      .set("layers", json::Array{json::Value(s.layers.begin), json::Value(s.layers.end)})
      .set("device", s.device)
      .set("busy_s", s.busy_s)
      .set("busy_cpu_s", s.busy_cpu_s)
      .set("idle_s", std::max(0.0, wall - s.busy_s))
      .set("wait_s", s.wait_s)
      .set("send_s", s.send_s)
      .set("bubble_fraction", wall > 0 ? std::max(0.0, 1.0 - s.busy_s / wall) : 0.0)
      .set("forwards", s.forwards)
      .set("backwards", s.backwards)
      .set("updates", s.updates)
      .set("skipped", s.skipped)
      .set("staleness_analytic", analytic)
      .set("staleness_max", s.max_staleness())
      .set("staleness_histogram", std::move(histogram))
      .set("peak_activation_bytes", static_cast<int64_t>(s.peak_bytes));
#if ECHELON_WITH_CUDA
  const Device device = Device::parse(s.device);
  if (device.is_cuda()) {
    entry.set("cuda_peak_allocated_bytes",
              static_cast<int64_t>(cuda::allocator_stats(device.index).peak_allocated_bytes));
  }
#endif
  return entry;
}
}  // namespace

json::Value PipelineEngine::report() const {
  if (options_.single_device) return json::Value();
  json::Value block = json::Value::object();
  block.set("schedule", schedule_name(options_.schedule))
      .set("schedule_now", schedule_name(current_))
      .set("partitions", static_cast<int64_t>(distributed() ? num_partitions_ : stages_.size()))
      .set("ppv", format_ppv(cuts_))
      .set("balance", options_.balance_auto ? "auto" : "none");
  if (options_.schedule == ScheduleKind::GPipe) block.set("micro_batches", options_.micro_batches);
  if (options_.schedule == ScheduleKind::Hybrid) {
    block.set("hybrid_switch_epoch", options_.hybrid_switch_epoch());
  }
  const double wall = wall_seconds();
  block.set("wall_s", wall).set("images_per_s", wall > 0 ? samples_done_ / wall : 0.0);
  json::Value stages = json::Value::array();
  const int K = distributed() ? num_partitions_ : static_cast<int>(stages_.size());
  for (const PartitionStats& s : partition_stats()) {
    stages.push(partition_report(s, wall, analytic_staleness(options_.schedule, K, s.partition)));
  }
  block.set("stages", std::move(stages));
  if (distributed()) {
    block.set("processes", distributed_report());
  } else {
    // Where each partition ran and how activations crossed each cut (docs/pipeline.md).
    json::Value devices = json::Value::array(), links = json::Value::array();
    for (const auto& stage : stages_) devices.push(stage->device().to_string());
    for (const auto& link : forward_links_) links.push(link->kind());
    block.set("devices", std::move(devices)).set("links", std::move(links));
  }
  return block;
}

EngineFactory pipeline_engine_factory(const PipelineOptions& options) {
  options.validate();
  return [options](std::shared_ptr<Sequential> model, const SGDOptions& sgd, Device device) {
    return std::unique_ptr<StepEngine>(
        std::make_unique<PipelineEngine>(std::move(model), sgd, device, options));
  };
}

}  // namespace echelon::parallel
