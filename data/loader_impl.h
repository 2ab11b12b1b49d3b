// Loader's insides, shared by its two drivers: the threaded pipeline (loader.cpp, one or more
// threads per stage joined by rings) and the inline mode (loader_inline.cpp, workers = 0: next()
// runs every stage on the calling thread). Both call the same per-item stage functions below, so
// for the same options and seed they hand out the same batches bit for bit (the threaded loader
// with workers = 1 is deterministic: every ring is FIFO, and each stage emits in input order).
// Private to data/: not part of the loader's API.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <optional>
#include <thread>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/echo.h>
#include <echelon/data/loader.h>
#include <echelon/data/random_keys.h>
#include <echelon/data/ring.h>
#include <echelon/data/stages.h>

namespace echelon::data {

// How many examples ahead of the one being read the loader asks the data set to prefetch: one
// example's work (~1 us in memory) covers a main-memory miss several times over.
inline constexpr size_t kPrefetchAhead = 2;

struct Decoded {
  Image image;  // (C, H, W)
  int64_t index = 0, label = 0, copy = 0;
  bool fresh = true;
};

struct Sample {
  std::vector<float> chw;  // (C, H, W)
  int64_t index = 0, label = 0;
  bool fresh = true;
};

struct Loader::Impl {
  Impl(const Dataset& dataset, const LoaderOptions& options, int64_t epoch);
  ~Impl() {
    control.stop();
    join();
  }

  bool runs_inline() const { return options.workers == 0; }
  void join() {
    for (auto& thread : threads)
      if (thread.joinable()) thread.join();
    threads.clear();
  }
  double current_factor() const { return factor.load(std::memory_order_relaxed); }
  void count_copies(int64_t copies, int64_t items) {
    fresh.fetch_add(items, std::memory_order_relaxed);
    echoed.fetch_add((copies - 1) * items, std::memory_order_relaxed);
  }
  double upstream_rate() const;
  bool skip_bad() const { return options.on_bad_sample == OnBadSample::Skip; }

  // --- Per-item stage functions, called by both drivers. Emit(Out) returns false once the
  // pipeline is stopping. A bad sample they may skip is counted and emits nothing.
  template <typename Emit>
  void read_one(int64_t index, Emit& emit);
  // Decode + augment fused (Dataset::decode_augment): records -> samples.
  template <typename Emit>
  void decode_augment_one(const RawRecord& record, Emit& emit);
  // The separate stages: records -> decoded (echo before augmentation) -> samples.
  template <typename Emit>
  void decode_one(const RawRecord& record, Emit& emit);
  template <typename Emit>
  void augment_one(const Decoded& item, Emit& emit);
  // The augmented sample and, with echo after augmentation, its echo copies.
  template <typename Emit>
  void emit_sample(Sample sample, Emit& emit);
  // The shuffle buffer's step: `sample` goes in, maybe another comes out.
  std::optional<Sample> shuffle_one(ShuffleBuffer<Sample>& buffer, Sample sample);
  // Batching: adds a sample to `group`; a full group becomes a batch, pushed (with its echo
  // copies, echo at batch) through push(Batch) -> bool. Returns push's verdict.
  template <typename Push>
  bool batch_one(Sample sample, Push& push);
  // The group as a batch (the last one of an epoch when `last`: drop_last may drop it).
  template <typename Push>
  bool flush_batch(bool last, Push& push);
  Batch make_batch(std::vector<Sample>& group) const;
  // A made batch of `items` examples, with its echo copies (echo at batch), through push.
  template <typename Push>
  bool emit_batch(const Batch& batch, int64_t items, Push& push);
  // Empty (B, C, H, W) images and (B) labels, pinned for a CUDA device (the transfer's source).
  Batch empty_batch(int64_t b) const;

  // --- The threaded driver (loader.cpp).
  void start_threads();
  template <typename Input>  // `records`, or `claimed_records` when reads_in_decode
  void start_decode_stages(Input& input);
  // The first stage's input, taken from `order` by an atomic claim (no source thread, no ring):
  // the next dataset index, or nullopt at the end of the order or once stopping.
  std::optional<int64_t> claim_index();
  // In memory, the decode workers' input: the next index, read on the spot (read_stats counted
  // as the read stage would), skipping bad samples; nullopt at the end or on a read error.
  std::optional<RawRecord> claim_and_read(int worker);
  // The two as sources start_stage pops from.
  struct ClaimedIndices {
    Impl* impl;
    std::optional<int64_t> pop() { return impl->claim_index(); }
  };
  struct ClaimedRecords {
    Impl* impl;
    std::optional<RawRecord> pop(int worker) { return impl->claim_and_read(worker); }
  };
  void run_batch();  // shuffle buffer + batching, one thread
  void run_transfer();
  void run_inline_worker();  // one_thread: the inline driver, on the loader's thread

  // --- The inline driver (loader_inline.cpp): next() on the calling thread, or, when
  // one_thread, on the loader's one thread.
  void start_inline();
  std::optional<Batch> next_inline();
  void feed_inline(int64_t index);
  void finish_inline();
  void hand_out_inline(Batch batch);
  // The direct path: the next batch's examples read straight into its slots
  // (Dataset::read_into), no record, sample, shuffle buffer or group in between.
  void fill_direct();

  const Dataset& dataset;
  const LoaderOptions options;
  const int64_t epoch;
  const Shape source_shape;  // (C, H, W) of a decoded image; H = W = 0: sizes vary
  const Shape shape;         // (C, H, W) of an example in a batch
  // Decode and augment run as one stage (Dataset::decode_augment), straight into `samples`;
  // never with echo before augmentation, which must repeat the un-augmented image.
  const bool fused;
  // Threaded, an in-memory data set's read (a copy) runs in the decode workers: a thread and a
  // ring hand-off per example would cost more than the read itself.
  const bool reads_in_decode;
  // workers = 1, an in-memory data set, batches on the CPU: one thread runs the inline driver and
  // hands its batches over the `batches` ring, the only thread boundary (run_inline_worker).
  const bool one_thread;
  // The inline driver (and one_thread's) fills each batch straight from the data set
  // (fill_direct) when nothing sits between decode+augment and batching: an in-memory set
  // (Dataset::reads_into), the fused stage, no shuffle buffer, no echo, no trace hook. An example
  // then costs its conversion to floats and nothing else: no allocations, no copies, no clock
  // reads. Same batches bit for bit (the epoch's order straight into groups of batch_size).
  const bool direct;
  PipelineControl control;
  // The threaded driver's rings (one slot each where unused). The source (`order`, claimed by
  // the first stage) and the shuffle buffer (on the batch thread) need neither thread nor ring:
  // each hand-off between threads costs wake-ups, and on a machine whose cores the training step
  // fills that CPU comes out of the step.
  MpmcRing<RawRecord> records;   // read -> decode
  MpmcRing<Decoded> decoded;     // decode -> augment
  MpmcRing<Sample> samples;      // augment -> shuffle + batch
  SpscRing<Batch> host_batches;  // batch -> transfer (device loads only)
  SpscRing<Batch> batches;       // -> consumer
  StageCounters source_stats, read_stats, decode_stats, augment_stats, shuffle_stats, batch_stats,
      transfer_stats;
  std::atomic<double> factor;
  std::atomic<int64_t> fresh{0}, echoed{0}, skipped{0};
  std::vector<std::thread> threads;
  Clock::time_point started = Clock::now();

  // The batch stage's state (its thread's, or the consumer's when inline).
  std::vector<Sample> group;
  int64_t batch_number = 0;

  // This epoch's dataset order; the threaded driver's next unclaimed position in it.
  std::vector<int64_t> order;
  std::atomic<size_t> next_claim{0};
  ClaimedIndices claimed_indices{this};
  ClaimedRecords claimed_records{this};

  // The inline driver's state (the thread running it: the consumer's, or one_thread's worker).
  size_t next_order = 0;
  std::optional<ShuffleBuffer<Sample>> shuffle_buffer;
  std::vector<int64_t> inline_tickets;
  std::vector<RawRecord> inline_records;
  std::vector<Decoded> inline_decoded;
  std::vector<Sample> inline_samples;
  std::deque<Batch> ready;  // batches made, not yet handed out (echo at batch: copies)
  bool input_done = false;

  // Consumer-side state (touched only by the thread calling next()/stats()).
  // consumed_items counts the items of batches the consumer finished (it called next() again),
  // the ones consumer_busy_s covers; the batch just handed out is not among them yet.
  int64_t consumed_items = 0, last_batch_items = 0, batches_out = 0;
  double consumer_busy_s = 0, consumer_stall_s = 0;
  std::optional<Clock::time_point> last_return;
  bool finished = false;
};

template <typename Emit>
void Loader::Impl::read_one(int64_t index, Emit& emit) {
  RawRecord record;
  try {
    record = dataset.read(index);
  } catch (const Error&) {
    if (!skip_bad()) throw;
    skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  emit(std::move(record));
}

template <typename Emit>
void Loader::Impl::emit_sample(Sample sample, Emit& emit) {
  int64_t copies = 1;
  if (options.echo_at == EchoPlacement::AfterAugment) {
    copies = echo_copies(current_factor(), options.seed, epoch, sample.index);
    count_copies(copies, 1);
  }
  for (int64_t c = 0; c < copies; ++c) {
    Sample copy{c + 1 < copies ? sample.chw : std::move(sample.chw), sample.index, sample.label,
                sample.fresh && c == 0};
    if (!emit(std::move(copy))) return;
  }
}

// Same augmentation key as the separate stages (copy 0: there is no echo before augmentation
// here), so the batches are bit-identical.
template <typename Emit>
void Loader::Impl::decode_augment_one(const RawRecord& record, Emit& emit) {
  // A bad --mean/--std fails the stage here, as in the separate augment stage; it must not be
  // mistaken for a bad sample below.
  for (int64_t ch = 0; ch < shape[0]; ++ch) normalise_channel(options.augment, shape[0], ch);
  Sample sample{{}, record.index, record.label, true};
  try {
    int64_t height = 0, width = 0;
    dataset.decode_augment(record, options.augment, {options.seed, epoch, record.index, 0},
                           sample.chw, height, width);
    ECH_CHECK(height == shape[1] && width == shape[2] &&
                  static_cast<int64_t>(sample.chw.size()) == shape[0] * height * width,
              record.source, ": decoded and augmented image is ", sample.chw.size(),
              " values of height ", height, " and width ", width, ", a batch example's shape is ",
              shape);
  } catch (const Error&) {
    if (!skip_bad()) throw;
    skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  emit_sample(std::move(sample), emit);
}

template <typename Emit>
void Loader::Impl::decode_one(const RawRecord& record, Emit& emit) {
  Decoded item{{}, record.index, record.label, 0, true};
  try {
    item.image = dataset.decode(record);
    const bool sizes_vary = source_shape[1] == 0;
    ECH_CHECK(item.image.channels == source_shape[0] &&
                  (sizes_vary ||
                   (item.image.height == source_shape[1] && item.image.width == source_shape[2])),
              record.source, ": decoded image is (", item.image.channels, ", ", item.image.height,
              ", ", item.image.width, "), the dataset's shape is ", source_shape);
  } catch (const Error&) {
    if (!skip_bad()) throw;
    skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  int64_t copies = 1;
  if (options.echo_at == EchoPlacement::BeforeAugment) {
    copies = echo_copies(current_factor(), options.seed, epoch, record.index);
    count_copies(copies, 1);
  }
  for (int64_t c = 0; c < copies; ++c) {
    Decoded copy{c + 1 < copies ? item.image : std::move(item.image), item.index, item.label, c,
                 c == 0};
    if (!emit(std::move(copy))) return;
  }
}

template <typename Emit>
void Loader::Impl::augment_one(const Decoded& item, Emit& emit) {
  const Image image =
      augment_image(item.image, options.augment, {options.seed, epoch, item.index, item.copy});
  Sample sample{std::vector<float>(static_cast<size_t>(image.numel())), item.index, item.label,
                item.fresh};
  to_float(image, options.augment, sample.chw.data());
  emit_sample(std::move(sample), emit);
}

inline std::optional<Sample> Loader::Impl::shuffle_one(ShuffleBuffer<Sample>& buffer,
                                                       Sample sample) {
  const int64_t item = shuffle_stats.inputs.fetch_add(1, std::memory_order_relaxed);
  // Without a buffer the stage is a pass-through that is never traced: no clock read per item.
  if (options.shuffle_buffer == 0) return buffer.add(std::move(sample));
  const auto work_start = Clock::now();
  std::optional<Sample> released = buffer.add(std::move(sample));
  shuffle_stats.traced(0, item, work_start);
  return released;
}

template <typename Push>
bool Loader::Impl::batch_one(Sample sample, Push& push) {
  batch_stats.inputs.fetch_add(1, std::memory_order_relaxed);
  group.push_back(std::move(sample));
  if (static_cast<int64_t>(group.size()) < options.batch_size) return true;
  return flush_batch(false, push);
}

template <typename Push>
bool Loader::Impl::flush_batch(bool last, Push& push) {
  if (group.empty() ||
      (last && options.drop_last && static_cast<int64_t>(group.size()) < options.batch_size))
    return true;
  const auto work_start = Clock::now();
  const int64_t items = static_cast<int64_t>(group.size());
  Batch batch = make_batch(group);
  batch_stats.add_busy(Clock::now() - work_start);
  batch_stats.traced(0, batch_number, work_start);
  return emit_batch(batch, items, push);
}

template <typename Push>
bool Loader::Impl::emit_batch(const Batch& batch, int64_t items, Push& push) {
  int64_t copies = 1;
  if (options.echo_at == EchoPlacement::Batch) {
    copies = echo_copies(current_factor(), options.seed, epoch, batch_number);
    count_copies(copies, items);
  }
  ++batch_number;
  for (int64_t c = 0; c < copies; ++c) {
    Batch copy = batch;  // shares the tensors: batches are read-only for the consumer
    if (c > 0) copy.fresh = 0;
    if (!push(std::move(copy))) return false;
  }
  return true;
}

}  // namespace echelon::data
