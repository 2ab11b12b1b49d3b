#include <echelon/parallel/stage.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <exception>
#include <optional>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/loss.h>
#include <echelon/parallel/deferred_stats.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

namespace {
using Clock = TraceRecorder::Clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds the calling thread has run. Beside busy_s (wall) it separates compute that got
// slower from compute that was preempted: on a loaded machine busy_s grows, this does not.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

int64_t payload_bytes(const Message& message) {
  const auto bytes = [](const Tensor& t) { return t.defined() ? t.nbytes() : 0; };
  return static_cast<int64_t>(bytes(message.tensor) + bytes(message.labels));
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& tensors) {
  NoGradGuard no_grad;
  std::vector<Tensor> copies;
  copies.reserve(tensors.size());
  for (const Tensor& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

// Writes `values` into the parameter tensors in place: the autograd graph holds references to
// these very tensors, so its backward reads whatever they hold now.
void assign_all(std::vector<Tensor>& params, const std::vector<Tensor>& values) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor target = params[i].detach();
    ops::copy_(target, values[i]);
  }
}
}  // namespace

Stage::Stage(int partition, int num_partitions, LayerRange range,
             std::shared_ptr<Sequential> layers, Device device, const SGDOptions& sgd)
    : partition_(partition),
      num_partitions_(num_partitions),
      range_(range),
      layers_(std::move(layers)),
      device_(device),
      sgd_(layers_->named_parameters(), sgd),
      params_(layers_->parameters()),
      device_trace_(std::make_unique<DeviceTrace>(nullptr, device, partition)) {
  stats_.partition = partition;
  stats_.layers = range;
  stats_.device = device.to_string();
}

std::string Stage::label() const {
  return str("partition ", partition_, " (layers [", range_.begin, ", ", range_.end, ") on ",
             device_.to_string(), ")");
}

PartitionStats Stage::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

int64_t Stage::version() const {
  std::lock_guard lock(stats_mutex_);
  return stats_.version;
}

void Stage::account(size_t add, size_t remove) {
  std::lock_guard lock(stats_mutex_);
  stats_.held_bytes = stats_.held_bytes + add - remove;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.held_bytes);
}

void Stage::trace(TraceTrack track, const char* what, Clock::time_point start, int64_t id) {
  // The name is only formatted when someone records: no string work per operation otherwise.
  if (!context_.trace) return;
  std::string name = id >= 0 ? str(what, ' ', id) : std::string(what);
  context_.trace->record(partition_, track, std::move(name), start, Clock::now(), id);
}

void Stage::connect(const StageLinks& links, const StageContext& context) {
  links_ = links;
  context_ = context;
  policy_ = stage_policy(context.schedule, num_partitions_, partition_, context.micro_batches);
  next_schedule_ = context.schedule;
  device_trace_ = std::make_unique<DeviceTrace>(context.trace, device_, partition_);
  if (context.deferred_stats) sgd_.set_guard(context.deferred_stats->guard());
}

void Stage::run() {
  try {
#if ECHELON_WITH_CUDA
    // Each partition gets its own stream, so partitions sharing a GPU overlap.
    std::optional<cuda::Stream> stream;
    std::optional<cuda::StreamGuard> guard;
    if (device_.is_cuda()) {
      stream.emplace(device_.index);
      guard.emplace(*stream);
      own_stream_ = true;
    }
#endif
    while (advance(/*wait=*/true) != Progress::Closed) {
    }
  } catch (const std::exception& e) {
    context_.fail(str(label(), ": ", message_of(e)));
  }
}

void Stage::run_inline() {
  try {
    while (advance(/*wait=*/false) == Progress::Ran) {
    }
  } catch (const std::exception& e) {
    context_.fail(str(label(), ": ", message_of(e)));
    throw;
  }
}

Stage::Progress Stage::advance(bool wait) {
  switch (next_op(policy_, static_cast<int64_t>(in_flight_.size()), !flushing_)) {
    case NextOp::Forward:
      return forward_next(wait);
    case NextOp::Backward:
      return backward_oldest(wait);
    case NextOp::Drained:
      return finish_flush();
  }
  return Progress::Closed;
}

std::optional<Message> Stage::receive(Transport* from, const char* what, bool wait) {
  const auto start = Clock::now();
  std::optional<Message> message = wait ? from->recv() : from->try_recv();
  {
    std::lock_guard lock(stats_mutex_);
    stats_.wait_s += seconds_since(start);
    // Partition 0's activations come from the driver, not from a neighbour.
    if (message && (from != links_.forward_in || partition_ > 0))
      stats_.bytes_received += payload_bytes(*message);
  }
  if (message && message->kind != Message::Kind::Flush) {
    trace(TraceTrack::Receive, what, start, message->id);
  }
  return message;
}

bool Stage::send(Transport* to, Message message, const char* what) {
  const auto start = Clock::now();
  const int64_t id = message.id;
  const bool flush = message.kind == Message::Kind::Flush;
  const int64_t bytes = payload_bytes(message);
  const bool sent = to->send(std::move(message));
  {
    std::lock_guard lock(stats_mutex_);
    stats_.send_s += seconds_since(start);
    stats_.bytes_sent += sent ? bytes : 0;
  }
  if (!flush) trace(TraceTrack::Send, what, start, id);
  return sent;
}

// The next message from upstream: a mini-batch to forward, or a Flush to pass on.
Stage::Progress Stage::forward_next(bool wait) {
  std::optional<Message> message = receive(links_.forward_in, "recv act", wait);
  if (!message) return wait ? Progress::Closed : Progress::Idle;
  if (message->kind == Message::Kind::Flush) {
    next_schedule_ = message->schedule;
    flush_ends_epoch_ = message->epoch_end;
    flushing_ = true;
    const bool passed =
        !links_.forward_out || send(links_.forward_out, std::move(*message), "send flush");
    return passed ? Progress::Ran : Progress::Closed;
  }
  ECH_CHECK(message->kind == Message::Kind::Forward, "expected an activation, got a gradient");
  in_flight_.push_back(forward(std::move(*message)));
  if (!links_.forward_out) return Progress::Ran;
  Message activation = in_flight_.back().message;
  activation.tensor = in_flight_.back().root.detach();
  return send(links_.forward_out, std::move(activation), "send act") ? Progress::Ran
                                                                     : Progress::Closed;
}

// The backward of the oldest mini-batch in flight (on the last partition it needs no message).
Stage::Progress Stage::backward_oldest(bool wait) {
  InFlight& state = in_flight_.front();
  std::optional<Message> grad;
  if (links_.backward_in) {
    grad = receive(links_.backward_in, "recv grad", wait);
    if (!grad) return wait ? Progress::Closed : Progress::Idle;
    ECH_CHECK(grad->kind == Message::Kind::Backward && grad->id == state.message.id,
              "expected the gradient of mini-batch ", state.message.id, ", got message ", grad->id);
  }
  const auto start = Clock::now();
  Message upstream = backward(state, grad ? &*grad : nullptr);
  trace(TraceTrack::Compute, "B", start, state.message.id);
  device_trace_->resolve(false);
  account(0, state.bytes);
  in_flight_.pop_front();
  if (!links_.backward_out) return Progress::Ran;
  return send(links_.backward_out, std::move(upstream), "send grad") ? Progress::Ran
                                                                     : Progress::Closed;
}

// Flushed: every mini-batch sent so far is through; gpipe applies its one update now.
Stage::Progress Stage::finish_flush() {
  if (pending_update_) step(pending_lr_);
#if ECHELON_WITH_CUDA
  // The driver reads the weights once every partition has flushed (checkpoint, evaluation, the
  // broadcast to the other processes) on its own stream: the last update must have landed.
  if (own_stream_) ECH_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(device_.index)));
#endif
  device_trace_->resolve(true);  // the partition is drained: the epoch's kernels are all done
  flushing_ = false;
  policy_ = stage_policy(next_schedule_, num_partitions_, partition_, context_.micro_batches);
  if (!context_.flushed->push(flush_ends_epoch_ ? 1 : 0)) return Progress::Closed;
  if (context_.results_may_lag && partition_ + 1 == num_partitions_) {
    BatchResult end;
    end.flush_end = true;
    if (!context_.results->push(end)) return Progress::Closed;
  }
  return Progress::Ran;
}

Stage::InFlight Stage::forward(Message message) {
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const DeviceSpan device_span(*device_trace_, "F", message.id);
  InFlight state;
  Tensor x = message.tensor;
  ECH_CHECK(x.defined(), "mini-batch ", message.id, " arrived without a tensor");
  // Onto a GPU: asynchronous on this stream when the host side is pinned (the loader's batches),
  // ordered before the kernels that read it. Onto the CPU the copy must have landed: blocking.
  const bool non_blocking = device_.is_cuda();
  if (x.device() != device_) x = x.to(device_, non_blocking);
  if (message.labels.defined() && message.labels.device() != device_) {
    message.labels = message.labels.to(device_, non_blocking);
  }
  state.input = partition_ == 0 ? x : x.detach().set_requires_grad(true);
  state.version = version();
  state.bytes = state.input.nbytes();
  if (policy_.stash_weights) {
    state.snapshot = clone_all(params_);
    for (const Tensor& t : state.snapshot) state.bytes += t.nbytes();
  }
  // Weight prediction: a stale partition's gradient lands `window - 1` updates after its
  // forward, so the forward runs on an extrapolation of the weights at that point instead.
  const int64_t predict_steps =
      context_.predict_weights && policy_.update_per_backward && !policy_.stash_weights
          ? policy_.window - 1
          : 0;
  std::vector<Tensor> current;
  if (predict_steps > 0) current = predict_weights(predict_steps, message.lr);
  Tensor out = state.input;
  for (size_t i = 0; i < layers_->size();) {
    size_t ran = 1;
    // One span per layer: "L3 Conv2d 12" (the layer's name in the model, i.e. its flat index or
    // a split block's, its kind, the batch id).
    if (device_trace_->active()) {
      const auto& layer = layers_->layers()[i];
      const DeviceSpan layer_span(*device_trace_,
                                  str("L", layers_->named_children()[i].first, " ", layer->name()),
                                  message.id);
      out = layer->forward(out);
    } else {  // the pairs Sequential::forward fuses as one node, the same result bit for bit
      out = layers_->forward_from(i, out, &ran);
    }
    state.bytes += out.nbytes();
    i += ran;
  }
  // The graph holds the parameter tensors themselves: the backward reads w again, not w-hat.
  if (!current.empty()) assign_all(params_, current);
  if (partition_ + 1 == num_partitions_) {
    loss(state, message, out);
  } else {
    state.root = out;
  }
  state.message = std::move(message);
  state.message.tensor = Tensor();
  const double cpu = thread_cpu_seconds() - cpu_start;  // read first: within busy
  const double busy = busy_since(start);
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.forwards;
    stats_.busy_s += busy;
    stats_.busy_cpu_s += cpu;
    stats_.forward_s += busy;
  }
  account(state.bytes, 0);
  trace(TraceTrack::Compute, "F", start, state.message.id);
  return state;
}

void Stage::loss(InFlight& state, const Message& message, const Tensor& out) {
  ECH_CHECK(message.labels.defined(), "mini-batch ", message.id,
            " reached the last partition without labels");
  // Deferred, the loss's kernel also counts the step's statistics where it can (one launch less).
  std::optional<ops::StepStatistics> statistics;
  if (context_.deferred_stats) statistics = context_.deferred_stats->next_statistics(out);
  Tensor loss = cross_entropy(out, message.labels, statistics ? &*statistics : nullptr);
  BatchResult result;
  result.id = message.id;
  result.batch_index = message.batch_index;
  result.samples = out.size(0);
  state.root = loss;
  if (context_.deferred_stats) {  // read later, with the other steps' (no synchronisation here)
    context_.deferred_stats->record(result, loss, statistics->correct, message.labels, out.size(1));
    return;
  }
  result.loss = loss.item<float>();
  result.correct = correct_count(out, message.labels);
  result.finite = std::isfinite(result.loss);
  state.skip = !result.finite;
  if (context_.results_may_lag) {
    context_.results->push(result);  // waits for the driver's next relay; false once closed
    return;
  }
  // In one process the driver's results ring is sized for every message the pipeline can hold,
  // so a full one is a bug; failing beats blocking the last partition (and the driver) for ever.
  ECH_CHECK(context_.results->try_push(result) || context_.results->closed(),
            "the results ring is full (", context_.results->capacity(), " entries)");
}

Message Stage::backward(InFlight& state, const Message* grad) {
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const DeviceSpan device_span(*device_trace_, "B", state.message.id);
  Message upstream;
  upstream.kind = Message::Kind::Backward;
  upstream.id = state.message.id;
  upstream.batch_index = state.message.batch_index;
  // A skipped mini-batch (non-finite loss) travels back as an undefined gradient: no update.
  const bool skip = state.skip || (grad && !grad->tensor.defined());
  if (skip) {
    const double cpu = thread_cpu_seconds() - cpu_start;
    const double busy = busy_since(start);
    std::lock_guard lock(stats_mutex_);
    ++stats_.skipped;
    stats_.busy_s += busy;
    stats_.busy_cpu_s += cpu;
    stats_.backward_s += busy;
    return upstream;
  }
  std::vector<Tensor> current;
  if (!state.snapshot.empty()) {
    current = clone_all(params_);
    assign_all(params_, state.snapshot);
  }
  // With stashing the backward reads the forward's weights (even a parameterless partition's).
  const int64_t read_version = policy_.stash_weights ? state.version : version();
  // The backward that an update follows (every one, or gpipe's last micro-batch before the
  // flush): each parameter's gradient is final as autograd finishes it, so data parallelism starts
  // summing full buckets while the earlier layers' backward still runs.
  const bool update_follows = policy_.update_per_backward || (flushing_ && in_flight_.size() == 1);
  LeafReadyFn gradient_ready;
  if (update_follows && context_.gradient_buckets && context_.gradient_buckets->overlaps()) {
    gradient_ready = [buckets = context_.gradient_buckets.get()](const TensorImpl& leaf) {
      buckets->gradient_ready(leaf);
    };
  }
  // The loss's seed: the engine's shared 1 (no fill kernel on a GPU) unless a micro-batch weighs
  // its loss (gpipe).
  Tensor root_grad;
  if (grad)
    root_grad = grad->tensor;
  else if (state.message.loss_weight != 1.0 || state.root.numel() != 1)
    root_grad = Tensor::full(state.root.shape(), state.message.loss_weight, state.root.dtype(),
                             state.root.device());
  ::echelon::backward(state.root, root_grad, /*retain_graph=*/false, gradient_ready);
  if (!current.empty()) assign_all(params_, current);
  if (partition_ > 0) upstream.tensor = state.input.grad();
  const double cpu = thread_cpu_seconds() - cpu_start;
  const double busy = busy_since(start);
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.backwards;
    ++stats_.staleness[read_version - state.version];
    stats_.busy_s += busy;
    stats_.busy_cpu_s += cpu;
    stats_.backward_s += busy;
  }
  if (policy_.update_per_backward) {
    step(state.message.lr);
  } else {
    pending_update_ = true;
    pending_lr_ = state.message.lr;
  }
  return upstream;
}

std::vector<Tensor> Stage::predict_weights(int64_t steps, double lr) {
  const std::vector<Tensor>& buffers = sgd_.momentum_buffers();
  std::vector<Tensor> current = clone_all(params_);
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!buffers[i].defined()) continue;  // before the first update: nothing to extrapolate
    Tensor target = params_[i].detach();
    ops::copy_(target,
               ops::add(current[i], ops::mul(buffers[i], -lr * static_cast<double>(steps))));
  }
  return current;
}

void Stage::step(double lr) {
  const auto start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const DeviceSpan device_span(*device_trace_, "step");
  double reduce_wait = 0, reduce_cpu = 0;  // blocked on the replicas' gradient sums: not compute
  if (context_.gradient_buckets) {
    const auto reduce_start = Clock::now();
    const double reduce_cpu_start = thread_cpu_seconds();
    context_.gradient_buckets->finish();
    reduce_cpu = thread_cpu_seconds() - reduce_cpu_start;
    reduce_wait = seconds_since(reduce_start);
    trace(TraceTrack::Compute, "all-reduce wait", reduce_start, -1);
  }
  sgd_.set_lr(lr);
  sgd_.step();
  sgd_.zero_grad();
  pending_update_ = false;
  // Within "B" when the update follows each backward: the span nests inside it on the track.
  trace(TraceTrack::Compute, "step", start, -1);
  const double cpu = thread_cpu_seconds() - cpu_start - reduce_cpu;
  const double busy = busy_since(start) - reduce_wait;
  std::lock_guard lock(stats_mutex_);
  ++stats_.updates;
  ++stats_.version;
  stats_.busy_s += busy;
  stats_.busy_cpu_s += cpu;
  stats_.update_s += busy;
  if (context_.gradient_buckets) stats_.all_reduce = context_.gradient_buckets->stats();
}

double Stage::busy_since(Clock::time_point start) const {
#if ECHELON_WITH_CUDA
  // CUDA launches return before the kernels run: with timed ops the host clock is read only once
  // this partition's stream has finished them (benchmarks; it costs the host/device overlap).
  if (context_.timed_ops && device_.is_cuda())
    ECH_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(device_.index)));
#endif
  return seconds_since(start);
}

}  // namespace echelon::parallel
