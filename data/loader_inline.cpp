// The inline driver (LoaderOptions::workers = 0, PyTorch's num_workers = 0): next() runs every
// stage on the calling thread, one dataset example at a time, through the same per-item stage
// functions as the threaded pipeline (loader_impl.h). Each example goes all the way from read to
// the shuffle buffer and the batch group before the next one is read, so every stage sees its
// inputs, and emits its outputs, in the order a one-worker threaded stage would: the batches are
// bit-identical to the threaded loader's with workers = 1. No threads, no rings, no wake-ups:
// for an in-memory data set, where an example costs well under a microsecond, that is cheaper
// than handing each one across five threads.
#include <echelon/data/loader_impl.h>

#ifdef ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::data {

namespace {

// Runs `body`; an exception becomes the pipeline's error, named after `stage` and `item` as the
// threaded stage would name it. Returns false then.
template <typename Body>
bool guarded(PipelineControl& control, const char* stage, int64_t item, Body body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    control.fail(stage, item, message_of(e));
    return false;
  }
}

}  // namespace

void Loader::Impl::start_inline() {
  guarded(control, "source", -1, [&] {
    order = epoch_order(dataset.size(), options.seed, epoch, options.shuffle);
    shuffle_buffer.emplace(options.shuffle_buffer, options.seed, epoch);
  });
}

std::optional<Batch> Loader::Impl::next_inline() {
#ifdef ECHELON_WITH_CUDA
  // Pinned allocations (make_batch) go through the target device's context, not device 0's.
  std::optional<cuda::DeviceGuard> device;
  if (options.device.is_cuda()) device.emplace(options.device.index);
#endif
  while (ready.empty() && !control.stopped() && !input_done) {
    if (direct) {
      fill_direct();
    } else if (next_order < order.size()) {
      // The example after next is on its way from memory while these two are worked on.
      if (next_order + kPrefetchAhead < order.size())
        dataset.prefetch(order[next_order + kPrefetchAhead]);
      feed_inline(order[next_order++]);
      source_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    } else {
      finish_inline();
    }
  }
  if (ready.empty() || control.stopped()) return std::nullopt;
  Batch batch = std::move(ready.front());
  ready.pop_front();
  return batch;
}

// One dataset example through read, decode (+ augment) and echo, into the shuffle buffer and on
// to the batch group.
void Loader::Impl::feed_inline(int64_t index) {
  inline_tickets.assign(1, index);
  const auto ticket_index = [](const int64_t& i) { return i; };
  const auto record_index = [](const RawRecord& record) { return record.index; };
  if (!run_stage_inline(
          control, read_stats, inline_tickets, inline_records,
          [this](int64_t i, auto& emit) { read_one(i, emit); }, ticket_index))
    return;
  if (fused) {
    if (!run_stage_inline(
            control, decode_stats, inline_records, inline_samples,
            [this](const RawRecord& record, auto& emit) { decode_augment_one(record, emit); },
            record_index))
      return;
  } else {
    if (!run_stage_inline(
            control, decode_stats, inline_records, inline_decoded,
            [this](const RawRecord& record, auto& emit) { decode_one(record, emit); },
            record_index))
      return;
    if (!run_stage_inline(
            control, augment_stats, inline_decoded, inline_samples,
            [this](const Decoded& item, auto& emit) { augment_one(item, emit); },
            [](const Decoded& item) { return item.index; }))
      return;
  }
  for (Sample& sample : inline_samples) {
    std::optional<Sample> released;
    if (!guarded(control, "shuffle", -1,
                 [&] { released = shuffle_one(*shuffle_buffer, std::move(sample)); }))
      return;
    if (!released) continue;
    shuffle_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    auto push = [this](Batch batch) {
      hand_out_inline(std::move(batch));
      return true;
    };
    if (!guarded(control, "batch", batch_number, [&] { batch_one(std::move(*released), push); }))
      return;
  }
}

// End of the epoch's input: the shuffle buffer's remaining items, then the last batch.
void Loader::Impl::finish_inline() {
  input_done = true;
  auto push = [this](Batch batch) {
    hand_out_inline(std::move(batch));
    return true;
  };
  while (!control.stopped()) {
    std::optional<Sample> rest = shuffle_buffer->drain();
    if (!rest) break;
    shuffle_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    if (!guarded(control, "batch", batch_number, [&] { batch_one(std::move(*rest), push); }))
      return;
  }
  if (!control.stopped())
    guarded(control, "batch", batch_number, [&] { flush_batch(/*last=*/true, push); });
}

// A finished batch (or an echo copy of one): to the device, synchronously, and into `ready`.
void Loader::Impl::hand_out_inline(Batch batch) {
  batch_stats.outputs.fetch_add(1, std::memory_order_relaxed);
#ifdef ECHELON_WITH_CUDA
  if (options.device.is_cuda()) {
    const int64_t number = transfer_stats.inputs.fetch_add(1, std::memory_order_relaxed);
    const auto work_start = Clock::now();
    Batch device_batch = batch;
    device_batch.images = batch.images.to(options.device);  // blocking: done when it returns
    device_batch.labels = batch.labels.to(options.device);
    transfer_stats.add_busy(Clock::now() - work_start);
    transfer_stats.traced(0, number, work_start);
    transfer_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    batch = std::move(device_batch);
  }
#endif
  ready.push_back(std::move(batch));
}

// The next batch_size examples of the order (fewer at its end), each read, decoded, augmented
// and converted straight into its slot of the batch: what feed_inline + flush_batch do, minus
// the record, the sample's float buffer and the copy into the batch. The counters move as the
// stages' would (items in and out; the fused stage's busy time covers the whole fill), with two
// clock reads per batch instead of four per example.
void Loader::Impl::fill_direct() {
  const int64_t item = shape[0] * shape[1] * shape[2];
  const int64_t capacity = options.batch_size;
  Batch batch = empty_batch(capacity);
  float* images = batch.images.data<float>();
  int64_t* labels = batch.labels.data<int64_t>();
  const auto work_start = Clock::now();
  int64_t filled = 0, taken = 0;
  bool failed = false;
  while (filled < capacity && next_order < order.size() && !failed) {
    if (next_order + kPrefetchAhead < order.size())
      dataset.prefetch(order[next_order + kPrefetchAhead]);
    const int64_t index = order[next_order++];
    ++taken;
    try {
      labels[filled] = dataset.read_into(index, options.augment, {options.seed, epoch, index, 0},
                                         images + filled * item, item);
      ++filled;
    } catch (const Error& e) {  // a bad sample, as decode_augment_one treats it
      if (skip_bad()) {
        skipped.fetch_add(1, std::memory_order_relaxed);
      } else {
        control.fail(decode_stats.name, index, message_of(e));
        failed = true;
      }
    } catch (const std::exception& e) {
      control.fail(decode_stats.name, index, message_of(e));
      failed = true;
    }
  }
  if (next_order == order.size()) input_done = true;
  decode_stats.add_busy(Clock::now() - work_start);
  // As the stages count an in-memory example: its read (a copy) succeeds, a bad one fails in
  // decode+augment.
  source_stats.outputs.fetch_add(taken, std::memory_order_relaxed);
  read_stats.inputs.fetch_add(taken, std::memory_order_relaxed);
  read_stats.outputs.fetch_add(taken, std::memory_order_relaxed);
  decode_stats.inputs.fetch_add(taken, std::memory_order_relaxed);
  decode_stats.outputs.fetch_add(filled, std::memory_order_relaxed);
  shuffle_stats.inputs.fetch_add(filled, std::memory_order_relaxed);
  shuffle_stats.outputs.fetch_add(filled, std::memory_order_relaxed);
  batch_stats.inputs.fetch_add(filled, std::memory_order_relaxed);
  if (options.echo_at == EchoPlacement::AfterAugment) count_copies(1, filled);
  if (failed) return;
  if (filled == 0 || (filled < capacity && options.drop_last)) return;
  if (filled < capacity) {  // the epoch's last, smaller batch: its own tensors, as make_batch's
    Batch last = empty_batch(filled);
    std::copy(images, images + filled * item, last.images.data<float>());
    std::copy(labels, labels + filled, last.labels.data<int64_t>());
    batch = std::move(last);
  }
  batch.fresh = filled;
  auto push = [this](Batch made) {
    hand_out_inline(std::move(made));
    return true;
  };
  guarded(control, "batch", batch_number, [&] { emit_batch(batch, filled, push); });
}

}  // namespace echelon::data
