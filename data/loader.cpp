// Loader: options, the threaded driver (one epoch's pipeline of threads and rings; see loader.h
// for the stage graph) and the public methods. The inline driver (workers = 0) is in
// loader_inline.cpp, the per-item stage functions both call in loader_impl.h.
#include <echelon/data/loader.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include <echelon/base/error.h>
#include <echelon/base/thread_name.h>
#include <echelon/data/loader_impl.h>

#ifdef ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::data {

const char* echo_placement_name(EchoPlacement placement) {
  switch (placement) {
    case EchoPlacement::BeforeAugment:
      return "before-augment";
    case EchoPlacement::AfterAugment:
      return "after-augment";
    case EchoPlacement::Batch:
      return "batch";
  }
  return "?";
}

EchoPlacement parse_echo_placement(const std::string& text) {
  if (text == "before-augment") return EchoPlacement::BeforeAugment;
  if (text == "after-augment") return EchoPlacement::AfterAugment;
  if (text == "batch") return EchoPlacement::Batch;
  ECH_FAIL("echo placement '", text, "' is not one of before-augment, after-augment, batch");
}

OnBadSample parse_on_bad_sample(const std::string& text) {
  if (text == "fail") return OnBadSample::Fail;
  if (text == "skip") return OnBadSample::Skip;
  ECH_FAIL("on_bad_sample '", text, "' is not one of fail, skip");
}

void LoaderOptions::set_echo(const std::string& text) {
  if (text == "auto") {
    echo_auto = true;
    echo_factor = 1.0;
    return;
  }
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ECH_CHECK(used == text.size() && !text.empty() && std::isfinite(value) && value >= 1.0 &&
                value <= kMaxEchoFactor,
            "echo factor '", text, "' must be a number in [1, ", kMaxEchoFactor,
            "] or 'auto' (e repeats each example e times; ", kMaxEchoFactor,
            " is the most that still trains on more than a handful of examples)");
  echo_auto = false;
  echo_factor = value;
}

namespace {

// The (C, H, W) of one example in a batch: the dataset's, or crop_to x crop_to when the
// augmentation cuts a square (then the dataset's images may vary in size: {C, 0, 0}).
Shape batch_shape(const Dataset& dataset, const AugmentOptions& augment) {
  Shape shape = dataset.image_shape();
  if (augment.crop_to > 0 && shape.size() == 3) return {shape[0], augment.crop_to, augment.crop_to};
  return shape;
}

// A ring that stays unused (inline: all of them) gets one slot.
size_t ring_slots(const LoaderOptions& options, int64_t requested, bool used = true) {
  return options.workers == 0 || !used ? 1 : static_cast<size_t>(requested);
}

// The batch rings carry one item per batch and their producer parks about once per batch: a
// fence per publish costs nothing there, while a membarrier per park interrupts the training
// step's threads on the other cores (data/ring.h). The per-example rings keep the asymmetric check:
// a fence per publish costs ~25 ns alone and far more against a busy consumer (bench_ring,
// echelon-fenced rows), at 2+ publishes per example.
constexpr WakeCheck kBatchRingWake = WakeCheck::Fenced;

}  // namespace

Loader::Impl::Impl(const Dataset& dataset, const LoaderOptions& options, int64_t epoch)
    : dataset(dataset),
      options(options),
      epoch(epoch),
      source_shape(dataset.image_shape()),
      shape(batch_shape(dataset, options.augment)),
      fused(options.fuse_decode_augment && options.echo_at != EchoPlacement::BeforeAugment &&
            dataset.fuses_decode_augment(options.augment)),
      reads_in_decode(dataset.in_memory()),
      one_thread(options.workers == 1 && reads_in_decode && !options.device.is_cuda()),
      direct((options.workers == 0 || one_thread) && fused && dataset.reads_into() &&
             options.shuffle_buffer == 0 && options.echo_factor == 1.0 && !options.echo_auto &&
             !options.on_work),
      records(ring_slots(options, options.ring_capacity, !reads_in_decode)),
      decoded(ring_slots(options, options.ring_capacity, !fused && !one_thread)),
      samples(ring_slots(options, options.ring_capacity, !one_thread)),
      host_batches(ring_slots(options, options.prefetch_batches, options.device.is_cuda()),
                   kBatchRingWake),
      batches(ring_slots(options, options.prefetch_batches), kBatchRingWake),
      source_stats("source", options.workers == 0 ? 0 : 1),  // 0 marks inline in the stats
      read_stats("read", options.workers),
      decode_stats(fused ? "decode+augment" : "decode", options.workers),
      augment_stats("augment", options.workers),
      shuffle_stats("shuffle", options.workers == 0 ? 0 : 1),
      batch_stats("batch", options.workers == 0 ? 0 : 1),
      transfer_stats("transfer", options.workers == 0 ? 0 : 1),
      factor(options.echo_factor) {
  for (StageCounters* c : {&source_stats, &read_stats, &decode_stats, &augment_stats,
                           &shuffle_stats, &batch_stats, &transfer_stats})
    c->on_work = &this->options.on_work;
  ECH_CHECK(shape.size() == 3 && shape[1] > 0 && shape[2] > 0, "Loader: dataset '", dataset.name(),
            "' has image shape ", shape, "; batching needs one fixed (C, H, W)");
  control.on_abort([this] {
    records.close();
    decoded.close();
    samples.close();
    host_batches.close();
    batches.close();
  });
}

std::optional<int64_t> Loader::Impl::claim_index() {
  if (control.stopped()) return std::nullopt;
  const size_t position = next_claim.fetch_add(1, std::memory_order_relaxed);
  if (position >= order.size()) return std::nullopt;
  source_stats.outputs.fetch_add(1, std::memory_order_relaxed);
  return order[position];
}

std::optional<RawRecord> Loader::Impl::claim_and_read(int worker) {
  for (;;) {
    if (control.stopped()) return std::nullopt;
    const size_t position = next_claim.fetch_add(1, std::memory_order_relaxed);
    if (position >= order.size()) return std::nullopt;
    source_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    const int64_t index = order[position];
    // As inline: the example after next is on its way from memory while this one is worked on.
    if (position + kPrefetchAhead < order.size())
      dataset.prefetch(order[position + kPrefetchAhead]);
    read_stats.inputs.fetch_add(1, std::memory_order_relaxed);
    const auto start = Clock::now();
    std::optional<RawRecord> record;
    auto keep = [&](RawRecord read) {
      record = std::move(read);
      return true;
    };
    try {
      read_one(index, keep);
    } catch (const std::exception& e) {
      control.fail("read", index, message_of(e));
      return std::nullopt;
    }
    const Clock::duration read_time = Clock::now() - start;
    read_stats.add_busy(read_time);
    // The decode worker counts its whole wait for this call as stall; the read was work.
    decode_stats.add_stall(-read_time);
    read_stats.traced(worker, index, start);
    if (record) {
      read_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      return record;
    }  // else a bad sample, skipped: claim the next
  }
}

Batch Loader::Impl::empty_batch(int64_t b) const {
  // For a GPU the batch is built straight in pinned memory, so the transfer stage copies it to the
  // device asynchronously without first copying it into a pinned staging buffer.
  const bool pinned = options.device.is_cuda();
  Batch batch;
  batch.images = Tensor::empty({b, shape[0], shape[1], shape[2]}, kFloat32, Device::cpu(), pinned);
  batch.labels = Tensor::empty({b}, kInt64, Device::cpu(), pinned);
  return batch;
}

Batch Loader::Impl::make_batch(std::vector<Sample>& group) const {
  const auto b = static_cast<int64_t>(group.size());
  const int64_t item = shape[0] * shape[1] * shape[2];
  Batch batch = empty_batch(b);
  float* images = batch.images.data<float>();
  int64_t* labels = batch.labels.data<int64_t>();
  for (int64_t i = 0; i < b; ++i) {
    std::copy(group[i].chw.begin(), group[i].chw.end(), images + i * item);
    labels[i] = group[i].label;
    batch.fresh += group[i].fresh ? 1 : 0;
  }
  group.clear();
  return batch;
}

// The shuffle buffer and the batching, on one thread: both are sequential and cheap per item, so a
// ring between them would cost more in hand-offs than it could overlap.
void Loader::Impl::run_batch() {
  SpscRing<Batch>& out = options.device.is_cuda() ? host_batches : batches;
  bool batching = false;  // which stage an exception came from: batch, else shuffle
  try {
#ifdef ECHELON_WITH_CUDA
    // Pinned allocations go through the target device's context, not device 0's.
    std::optional<cuda::DeviceGuard> device;
    if (options.device.is_cuda()) device.emplace(options.device.index);
#endif
    ShuffleBuffer<Sample> buffer(options.shuffle_buffer, options.seed, epoch);
    auto push = [&](Batch batch) {
      bool pushed = out.try_push(batch);
      if (!pushed) {
        const auto start = Clock::now();
        pushed = out.push(std::move(batch));
        batch_stats.add_stall(Clock::now() - start);
      }
      if (pushed) batch_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      return pushed;
    };
    auto forward = [&](std::optional<Sample> sample) {
      if (!sample) return true;
      shuffle_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      batching = true;
      return batch_one(std::move(*sample), push);
    };
    bool open = true;
    while (open && !control.stopped()) {
      std::optional<Sample> sample = samples.try_pop();
      if (!sample) {  // timed only when it waits (as start_stage's emit)
        const auto start = Clock::now();
        sample = samples.pop();
        shuffle_stats.add_stall(Clock::now() - start);  // the shuffle stage is this thread's input
      }
      if (!sample) break;
      batching = false;
      open = forward(shuffle_one(buffer, std::move(*sample)));
    }
    while (open && !control.stopped()) {
      batching = false;
      std::optional<Sample> rest = buffer.drain();
      if (!rest) break;
      open = forward(std::move(rest));
    }
    batching = true;
    if (open && !control.stopped()) flush_batch(/*last=*/true, push);
  } catch (const std::exception& e) {
    control.fail(batching ? "batch" : "shuffle", batching ? batch_number : -1, message_of(e));
  }
  out.close();
}

void Loader::Impl::run_transfer() {
#ifdef ECHELON_WITH_CUDA
  int64_t batch_number = 0;
  try {
    cuda::Stream copy_stream(options.device.index);
    cuda::StreamGuard guard(copy_stream);
    while (!control.stopped()) {
      std::optional<Batch> host = host_batches.pop();
      if (!host) break;
      const auto work_start = Clock::now();
      // The batch is in pinned memory (make_batch), so the H2D copy is asynchronous on the copy
      // stream; waiting for the event here (on this thread, not the trainer's) hands the
      // consumer a batch that is already on the device.
      Batch device_batch = *host;
      device_batch.images = host->images.to(options.device, /*non_blocking=*/true);
      device_batch.labels = host->labels.to(options.device, /*non_blocking=*/true);
      cuda::Event done;
      done.record(copy_stream.get());
      done.synchronize();
      transfer_stats.add_busy(Clock::now() - work_start);
      transfer_stats.traced(0, batch_number, work_start);
      transfer_stats.inputs.fetch_add(1, std::memory_order_relaxed);
      if (!batches.push(std::move(device_batch))) break;
      transfer_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      ++batch_number;
    }
  } catch (const std::exception& e) {
    control.fail("transfer", batch_number, message_of(e));
  }
#endif
  batches.close();
}

template <typename Input>
void Loader::Impl::start_decode_stages(Input& input) {
  if (fused) {
    start_stage<RawRecord, Sample>(
        threads, control, decode_stats, options.workers, input, samples,
        [this](const RawRecord& record, auto& emit) { this->decode_augment_one(record, emit); },
        [](const RawRecord& record) { return record.index; });
    return;
  }
  start_stage<RawRecord, Decoded>(
      threads, control, decode_stats, options.workers, input, decoded,
      [this](const RawRecord& record, auto& emit) { this->decode_one(record, emit); },
      [](const RawRecord& record) { return record.index; });
  start_stage<Decoded, Sample>(
      threads, control, augment_stats, options.workers, decoded, samples,
      [this](const Decoded& item, auto& emit) { this->augment_one(item, emit); },
      [](const Decoded& item) { return item.index; });
}

// workers = 1 in memory: read, decode and augment cost about a microsecond per example, the
// shuffle and the batch copy less; a ring hand-off between two of them costs the same again, and
// parking and waking a thread tens of microseconds, taken from the training step's cores. So the
// whole pipeline runs on one thread, the inline driver's code (the batches are those of
// workers = 0 and 1 by construction), overlapping the step as any worker does.
void Loader::Impl::run_inline_worker() {
  try {
    while (!control.stopped()) {
      std::optional<Batch> batch = next_inline();
      if (!batch) break;
      bool pushed = batches.try_push(*batch);
      if (!pushed) {
        const auto start = Clock::now();
        pushed = batches.push(std::move(*batch));
        batch_stats.add_stall(Clock::now() - start);
      }
      if (!pushed) break;
    }
  } catch (const std::exception& e) {
    control.fail("batch", batch_number, message_of(e));
  }
  batches.close();
}

void Loader::Impl::start_threads() {
  if (one_thread) {
    start_inline();
    threads.emplace_back([this] { run_inline_worker(); });
    set_thread_name(threads.back(), "ech-loader");
    return;
  }
  order = epoch_order(dataset.size(), options.seed, epoch, options.shuffle);
  if (reads_in_decode) {
    start_decode_stages(claimed_records);
  } else {
    start_stage<int64_t, RawRecord>(
        threads, control, read_stats, options.workers, claimed_indices, records,
        [this](int64_t index, auto& emit) { read_one(index, emit); },
        [](const int64_t& index) { return index; });
    start_decode_stages(records);
  }
  threads.emplace_back([this] { run_batch(); });
  set_thread_name(threads.back(), "ech-batch");
  if (options.device.is_cuda()) {
    threads.emplace_back([this] { run_transfer(); });
    set_thread_name(threads.back(), "ech-transfer");
  }
}

double Loader::Impl::upstream_rate() const {
  // The bottleneck among the stages before the echo point, from their busy time per item.
  std::vector<const StageCounters*> stages{&read_stats, &decode_stats};
  // (Fused, decode_stats covers the augmentation too.)
  if (options.echo_at != EchoPlacement::BeforeAugment && !fused) stages.push_back(&augment_stats);
  double rate = 0;
  for (const StageCounters* stage : stages) {
    const double busy_s = static_cast<double>(stage->busy_ns.load()) * 1e-9;
    const auto items = static_cast<double>(stage->inputs.load());
    if (items <= 0) return 0;
    if (busy_s <= 0) continue;
    // Inline (workers = 0) a stage runs on one thread, the consumer's.
    const double capacity = std::max(stage->workers, 1) * items / busy_s;
    rate = rate == 0 ? capacity : std::min(rate, capacity);
  }
  return rate;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  ECH_CHECK(dataset_ != nullptr, "Loader: dataset is null");
  ECH_CHECK(dataset_->size() >= 1, "Loader: dataset '", dataset_->name(), "' is empty");
  ECH_CHECK(options_.batch_size >= 1, "Loader: batch_size ", options_.batch_size, " < 1");
  ECH_CHECK(options_.workers >= 0 && options_.workers <= 256, "Loader: workers ", options_.workers,
            " not in [0, 256]");
  // Inline, the upstream runs on the consumer's thread between its steps: there is no rate gap
  // for echo = auto to measure (any e > 1 trades fresh data for speed; say how much).
  ECH_CHECK(!(options_.echo_auto && options_.workers == 0),
            "Loader: echo = auto needs worker threads (workers >= 1): with workers = 0 every "
            "stage runs inside next() on the consumer's thread, so there is no upstream rate to "
            "match; give a fixed echo factor");
  ECH_CHECK(options_.ring_capacity >= 1, "Loader: ring_capacity ", options_.ring_capacity, " < 1");
  ECH_CHECK(std::isfinite(options_.echo_factor) && options_.echo_factor >= 1.0 &&
                options_.echo_factor <= kMaxEchoFactor,
            "Loader: echo_factor ", options_.echo_factor, " must be in [1, ", kMaxEchoFactor, "]");
  ECH_CHECK(options_.shuffle_buffer >= 0, "Loader: shuffle_buffer ", options_.shuffle_buffer,
            " < 0");
  ECH_CHECK(options_.prefetch_batches >= 1 && options_.prefetch_batches <= 64,
            "Loader: prefetch_batches ", options_.prefetch_batches, " not in [1, 64]");
  ECH_CHECK(options_.augment.crop_padding >= 0, "Loader: crop_padding < 0");
#ifndef ECHELON_WITH_CUDA
  ECH_CHECK(!options_.device.is_cuda(), "Loader: device ", options_.device.to_string(),
            " needs a CUDA build of echelon");
#endif
  if (options_.echo_auto) options_.echo_factor = 1.0;
}

Loader::~Loader() = default;

void Loader::start_epoch(int64_t epoch) {
  impl_.reset();  // stops and joins the previous epoch, if any
  impl_ = std::make_unique<Impl>(*dataset_, options_, epoch);
  // echo = auto: the next epoch starts from the factor the last one settled on.
  if (options_.echo_auto) impl_->factor.store(auto_echo_.factor());
  if (impl_->runs_inline())
    impl_->start_inline();
  else
    impl_->start_threads();
}

void Loader::request_stop() {
  if (impl_) impl_->control.stop();
}

std::optional<Batch> Loader::next() {
  ECH_CHECK(impl_ != nullptr, "Loader::next: call start_epoch() first");
  Impl& impl = *impl_;
  if (impl.finished) return std::nullopt;
  const auto entered = Clock::now();
  if (impl.last_return) {
    const double busy_s = std::chrono::duration<double>(entered - *impl.last_return).count();
    impl.consumer_busy_s += busy_s;
    impl.consumed_items += impl.last_batch_items;
    // A new downstream measurement: the consumer just finished a batch. Update e before waiting
    // for the next one, so the upstream already echoes at the new factor while we wait. The rate
    // of this batch alone (not the epoch's running mean): a slow first step (allocation, CUDA
    // warm-up) then fades out through AutoEcho's smoothing instead of biasing e all epoch.
    if (options_.echo_auto && busy_s > 0) {
      const double downstream = static_cast<double>(impl.last_batch_items) / busy_s;
      impl.factor.store(auto_echo_.update(impl.upstream_rate(), downstream),
                        std::memory_order_relaxed);
    }
  }
  std::optional<Batch> batch;
  if (!impl.control.error()) batch = impl.runs_inline() ? impl.next_inline() : impl.batches.pop();
  impl.consumer_stall_s += seconds_since(entered);
  if (!batch || impl.control.error()) {
    impl.finished = true;
    impl.control.stop();
    impl.join();
    if (std::exception_ptr error = impl.control.error()) std::rethrow_exception(error);
    return std::nullopt;
  }
  impl.last_batch_items = batch->labels.size(0);
  batch->index = impl.batches_out++;
  impl.last_return = Clock::now();
  return batch;
}

int64_t Loader::batches_per_epoch_fresh() const {
  const int64_t n = dataset_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

LoaderStats Loader::stats() const {
  LoaderStats s;
  s.placement = options_.echo_at;
  s.echo_auto = options_.echo_auto;
  s.factor = options_.echo_auto ? auto_echo_.factor() : options_.echo_factor;
  if (!impl_) return s;
  const Impl& impl = *impl_;
  s.factor = impl.current_factor();
  s.fresh = impl.fresh.load();
  s.echoed = impl.echoed.load();
  s.effective_factor = s.fresh > 0 ? static_cast<double>(s.fresh + s.echoed) / s.fresh : 1.0;
  s.skipped = impl.skipped.load();
  s.batches = impl.batches_out;
  s.elapsed_s = seconds_since(impl.started);
  s.upstream_rate = impl.upstream_rate();
  s.downstream_rate = impl.consumer_busy_s > 0
                          ? static_cast<double>(impl.consumed_items) / impl.consumer_busy_s
                          : 0;
  s.measured_R = s.upstream_rate > 0 ? s.downstream_rate / s.upstream_rate : 0;
  s.consumer_stall_s = impl.consumer_stall_s;
  auto add = [&](const StageCounters& c, size_t occupancy, size_t capacity) {
    LoaderStageStats stage;
    stage.name = c.name;
    stage.workers = c.workers;
    stage.items = c.outputs.load();
    stage.busy_s = static_cast<double>(c.busy_ns.load()) * 1e-9;
    stage.stall_s = static_cast<double>(c.stall_ns.load()) * 1e-9;
    stage.rate = s.elapsed_s > 0 ? static_cast<double>(stage.items) / s.elapsed_s : 0;
    // Inline there are no rings between the stages; on one thread only the batch stage's.
    const bool no_ring = impl.runs_inline() || (impl.one_thread && c.name != "batch");
    stage.ring_occupancy = no_ring ? 0 : static_cast<int64_t>(occupancy);
    stage.ring_capacity = no_ring ? 0 : static_cast<int64_t>(capacity);
    s.stages.push_back(stage);
  };
  add(impl.source_stats, 0, 0);  // claimed from the order, no ring
  if (impl.reads_in_decode)
    add(impl.read_stats, 0, 0);  // read by the decode workers, no ring
  else
    add(impl.read_stats, impl.records.size(), impl.records.capacity());
  if (impl.fused) {  // one stage, "decode+augment", writing the augment stage's ring
    add(impl.decode_stats, impl.samples.size(), impl.samples.capacity());
  } else {
    add(impl.decode_stats, impl.decoded.size(), impl.decoded.capacity());
    add(impl.augment_stats, impl.samples.size(), impl.samples.capacity());
  }
  add(impl.shuffle_stats, 0, 0);  // on the batch thread, no ring
  if (options_.device.is_cuda()) {
    add(impl.batch_stats, impl.host_batches.size(), impl.host_batches.capacity());
    add(impl.transfer_stats, impl.batches.size(), impl.batches.capacity());
  } else {
    add(impl.batch_stats, impl.batches.size(), impl.batches.capacity());
  }
  return s;
}

json::Value LoaderStats::to_json() const {
  json::Value stage_list = json::Value::array();
  for (const LoaderStageStats& st : stages)
    stage_list.push(json::Value::object()
                        .set("name", st.name)
                        .set("workers", st.workers)
                        .set("items", st.items)
                        .set("rate", st.rate)
                        .set("busy_s", st.busy_s)
                        .set("stall_s", st.stall_s)
                        .set("ring_occupancy", st.ring_occupancy)
                        .set("ring_capacity", st.ring_capacity));
  return json::Value::object()
      .set("placement", echo_placement_name(placement))
      .set("auto", echo_auto)
      .set("factor", factor)
      .set("effective_factor", effective_factor)
      .set("fresh", fresh)
      .set("echoed", echoed)
      .set("skipped", skipped)
      .set("batches", batches)
      .set("upstream_rate", upstream_rate)
      .set("downstream_rate", downstream_rate)
      .set("measured_R", measured_R)
      .set("consumer_stall_s", consumer_stall_s)
      .set("elapsed_s", elapsed_s)
      .set("stages", std::move(stage_list));
}

}  // namespace echelon::data
