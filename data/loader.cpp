// Loader: builds one epoch's pipeline of threads and rings (see loader.h for the stage graph).
#include <echelon/data/loader.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include <echelon/base/error.h>
#include <echelon/base/thread_name.h>
#include <echelon/data/echo.h>
#include <echelon/data/random_keys.h>
#include <echelon/data/ring.h>
#include <echelon/data/stages.h>

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
  ECH_CHECK(used == text.size() && !text.empty() && std::isfinite(value) && value >= 1.0,
            "echo factor '", text, "' must be a number >= 1 or 'auto'");
  echo_auto = false;
  echo_factor = value;
}

namespace {

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

// True when `e` is a bad-sample error the options allow to skip.
bool skip_bad(const LoaderOptions& options) {
  return options.on_bad_sample == OnBadSample::Skip;
}

// The (C, H, W) of one example in a batch: the dataset's, or crop_to x crop_to when the
// augmentation cuts a square (then the dataset's images may vary in size: {C, 0, 0}).
Shape batch_shape(const Dataset& dataset, const AugmentOptions& augment) {
  Shape shape = dataset.image_shape();
  if (augment.crop_to > 0 && shape.size() == 3) return {shape[0], augment.crop_to, augment.crop_to};
  return shape;
}

}  // namespace

struct Loader::Impl {
  Impl(const Dataset& dataset, const LoaderOptions& options, int64_t epoch)
      : dataset(dataset),
        options(options),
        epoch(epoch),
        source_shape(dataset.image_shape()),
        shape(batch_shape(dataset, options.augment)),
        fused(options.fuse_decode_augment && options.echo_at != EchoPlacement::BeforeAugment &&
              dataset.fuses_decode_augment(options.augment)),
        tickets(options.ring_capacity),
        records(options.ring_capacity),
        decoded(options.ring_capacity),
        samples(options.ring_capacity),
        shuffled(options.ring_capacity),
        host_batches(static_cast<size_t>(options.prefetch_batches)),
        batches(static_cast<size_t>(options.prefetch_batches)),
        source_stats("source", 1),
        read_stats("read", options.workers),
        decode_stats(fused ? "decode+augment" : "decode", options.workers),
        augment_stats("augment", options.workers),
        shuffle_stats("shuffle", 1),
        batch_stats("batch", 1),
        transfer_stats("transfer", 1),
        factor(options.echo_factor) {
    for (StageCounters* c : {&source_stats, &read_stats, &decode_stats, &augment_stats,
                             &shuffle_stats, &batch_stats, &transfer_stats})
      c->on_work = &this->options.on_work;
    ECH_CHECK(shape.size() == 3 && shape[1] > 0 && shape[2] > 0, "Loader: dataset '",
              dataset.name(), "' has image shape ", shape, "; batching needs one fixed (C, H, W)");
    control.on_abort([this] {
      tickets.close();
      records.close();
      decoded.close();
      samples.close();
      shuffled.close();
      host_batches.close();
      batches.close();
    });
  }
  ~Impl() {
    control.stop();
    join();
  }

  void start();
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
  Batch make_batch(std::vector<Sample>& group) const;
  template <typename Emit>
  void emit_sample(Sample sample, Emit& emit);
  void start_decode_augment();
  void start_decode_then_augment();
  void run_source();
  void run_shuffle();
  void run_batch();
  void run_transfer();

  const Dataset& dataset;
  const LoaderOptions options;
  const int64_t epoch;
  const Shape source_shape;  // (C, H, W) of a decoded image; H = W = 0: sizes vary
  const Shape shape;         // (C, H, W) of an example in a batch
  // Decode and augment run as one stage (Dataset::decode_augment), straight into `samples`;
  // never with echo before augmentation, which must repeat the un-augmented image.
  const bool fused;
  PipelineControl control;
  MpmcRing<int64_t> tickets;     // source -> read: dataset indices
  MpmcRing<RawRecord> records;   // read -> decode
  MpmcRing<Decoded> decoded;     // decode -> augment
  MpmcRing<Sample> samples;      // augment -> shuffle
  SpscRing<Sample> shuffled;     // shuffle -> batch
  SpscRing<Batch> host_batches;  // batch -> transfer (device loads only)
  SpscRing<Batch> batches;       // -> consumer
  StageCounters source_stats, read_stats, decode_stats, augment_stats, shuffle_stats, batch_stats,
      transfer_stats;
  std::atomic<double> factor;
  std::atomic<int64_t> fresh{0}, echoed{0}, skipped{0};
  std::vector<std::thread> threads;
  Clock::time_point started = Clock::now();

  // Consumer-side state (touched only by the thread calling next()/stats()).
  // consumed_items counts the items of batches the consumer finished (it called next() again),
  // the ones consumer_busy_s covers; the batch just handed out is not among them yet.
  int64_t consumed_items = 0, last_batch_items = 0, batches_out = 0;
  double consumer_busy_s = 0, consumer_stall_s = 0;
  std::optional<Clock::time_point> last_return;
  bool finished = false;
};

void Loader::Impl::run_source() {
  try {
    for (int64_t index : epoch_order(dataset.size(), options.seed, epoch, options.shuffle)) {
      const auto start = Clock::now();
      if (!tickets.push(index)) break;
      source_stats.add_stall(Clock::now() - start);
      source_stats.outputs.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const std::exception& e) {
    control.fail("source", -1, message_of(e));
  }
  tickets.close();
}

void Loader::Impl::run_shuffle() {
  try {
    ShuffleBuffer<Sample> buffer(options.shuffle_buffer, options.seed, epoch);
    auto forward = [&](std::optional<Sample> out) {
      if (!out) return true;
      const auto start = Clock::now();
      const bool pushed = shuffled.push(std::move(*out));
      shuffle_stats.add_stall(Clock::now() - start);
      shuffle_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      return pushed;
    };
    bool open = true;
    while (open && !control.stopped()) {
      const auto start = Clock::now();
      std::optional<Sample> sample = samples.pop();
      shuffle_stats.add_stall(Clock::now() - start);
      if (!sample) break;
      const int64_t item = shuffle_stats.inputs.fetch_add(1, std::memory_order_relaxed);
      const auto work_start = Clock::now();
      std::optional<Sample> released = buffer.add(std::move(*sample));
      if (options.shuffle_buffer > 0) shuffle_stats.traced(0, item, work_start);
      open = forward(std::move(released));
    }
    while (open && !control.stopped()) {
      std::optional<Sample> rest = buffer.drain();
      if (!rest) break;
      open = forward(std::move(rest));
    }
  } catch (const std::exception& e) {
    control.fail("shuffle", -1, message_of(e));
  }
  shuffled.close();
}

Batch Loader::Impl::make_batch(std::vector<Sample>& group) const {
  const auto b = static_cast<int64_t>(group.size());
  const int64_t item = shape[0] * shape[1] * shape[2];
  // For a GPU the batch is built straight in pinned memory, so the transfer stage copies it to the
  // device asynchronously without first copying it into a pinned staging buffer.
  const bool pinned = options.device.is_cuda();
  Batch batch;
  batch.images = Tensor::empty({b, shape[0], shape[1], shape[2]}, kFloat32, Device::cpu(), pinned);
  batch.labels = Tensor::empty({b}, kInt64, Device::cpu(), pinned);
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

void Loader::Impl::run_batch() {
  SpscRing<Batch>& out = options.device.is_cuda() ? host_batches : batches;
  int64_t batch_number = 0;
  try {
#ifdef ECHELON_WITH_CUDA
    // Pinned allocations go through the target device's context, not device 0's.
    std::optional<cuda::DeviceGuard> device;
    if (options.device.is_cuda()) device.emplace(options.device.index);
#endif
    std::vector<Sample> group;
    bool open = true;
    auto emit = [&](bool last) {
      if (group.empty() ||
          (last && options.drop_last && static_cast<int64_t>(group.size()) < options.batch_size))
        return;
      const auto work_start = Clock::now();
      const int64_t items = static_cast<int64_t>(group.size());
      Batch batch = make_batch(group);
      batch_stats.add_busy(Clock::now() - work_start);
      batch_stats.traced(0, batch_number, work_start);
      int64_t copies = 1;
      if (options.echo_at == EchoPlacement::Batch) {
        copies = echo_copies(current_factor(), options.seed, epoch, batch_number);
        count_copies(copies, items);
      }
      ++batch_number;
      for (int64_t c = 0; c < copies && open; ++c) {
        Batch copy = batch;  // shares the tensors: batches are read-only for the consumer
        if (c > 0) copy.fresh = 0;
        const auto start = Clock::now();
        open = out.push(std::move(copy));
        batch_stats.add_stall(Clock::now() - start);
        if (open) batch_stats.outputs.fetch_add(1, std::memory_order_relaxed);
      }
    };
    while (open && !control.stopped()) {
      const auto start = Clock::now();
      std::optional<Sample> sample = shuffled.pop();
      batch_stats.add_stall(Clock::now() - start);
      if (!sample) break;
      batch_stats.inputs.fetch_add(1, std::memory_order_relaxed);
      group.push_back(std::move(*sample));
      if (static_cast<int64_t>(group.size()) == options.batch_size) emit(false);
    }
    if (open && !control.stopped()) emit(true);
  } catch (const std::exception& e) {
    control.fail("batch", batch_number, message_of(e));
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

// The augmented sample and, with echo after augmentation, its echo copies.
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

// The fused stage: records -> samples. Same augmentation key as the separate stages (copy 0:
// there is no echo before augmentation here), so the batches are bit-identical.
void Loader::Impl::start_decode_augment() {
  start_stage<RawRecord, Sample>(
      threads, control, decode_stats, options.workers, records, samples,
      [this](const RawRecord& record, auto& emit) {
        // A bad --mean/--std fails the stage here, as in the separate augment stage; it must not
        // be mistaken for a bad sample below.
        normalise_coefficients(options.augment, shape[0]);
        Sample sample{{}, record.index, record.label, true};
        try {
          int64_t height = 0, width = 0;
          dataset.decode_augment(record, options.augment, {options.seed, epoch, record.index, 0},
                                 sample.chw, height, width);
          ECH_CHECK(height == shape[1] && width == shape[2] &&
                        static_cast<int64_t>(sample.chw.size()) == shape[0] * height * width,
                    record.source, ": decoded and augmented image is ", sample.chw.size(),
                    " values of height ", height, " and width ", width,
                    ", a batch example's shape is ", shape);
        } catch (const Error&) {
          if (!skip_bad(options)) throw;
          skipped.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        emit_sample(std::move(sample), emit);
      },
      [](const RawRecord& record) { return record.index; });
}

// The separate stages: records -> decoded (echo before augmentation here) -> samples.
void Loader::Impl::start_decode_then_augment() {
  const EchoPlacement placement = options.echo_at;
  start_stage<RawRecord, Decoded>(
      threads, control, decode_stats, options.workers, records, decoded,
      [this, placement](const RawRecord& record, auto& emit) {
        Decoded item{{}, record.index, record.label, 0, true};
        try {
          item.image = dataset.decode(record);
          const bool sizes_vary = source_shape[1] == 0;
          ECH_CHECK(
              item.image.channels == source_shape[0] &&
                  (sizes_vary ||
                   (item.image.height == source_shape[1] && item.image.width == source_shape[2])),
              record.source, ": decoded image is (", item.image.channels, ", ", item.image.height,
              ", ", item.image.width, "), the dataset's shape is ", source_shape);
        } catch (const Error&) {
          if (!skip_bad(options)) throw;
          skipped.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        int64_t copies = 1;
        if (placement == EchoPlacement::BeforeAugment) {
          copies = echo_copies(current_factor(), options.seed, epoch, record.index);
          count_copies(copies, 1);
        }
        for (int64_t c = 0; c < copies; ++c) {
          Decoded copy{c + 1 < copies ? item.image : std::move(item.image), item.index, item.label,
                       c, c == 0};
          if (!emit(std::move(copy))) return;
        }
      },
      [](const RawRecord& record) { return record.index; });
  start_stage<Decoded, Sample>(
      threads, control, augment_stats, options.workers, decoded, samples,
      [this](const Decoded& item, auto& emit) {
        const Image image = augment_image(item.image, options.augment,
                                          {options.seed, epoch, item.index, item.copy});
        Sample sample{std::vector<float>(static_cast<size_t>(image.numel())), item.index,
                      item.label, item.fresh};
        to_float(image, options.augment, sample.chw.data());
        emit_sample(std::move(sample), emit);
      },
      [](const Decoded& item) { return item.index; });
}

void Loader::Impl::start() {
  threads.emplace_back([this] { run_source(); });
  set_thread_name(threads.back(), "ech-source");
  auto index_of_ticket = [](const int64_t& index) { return index; };
  start_stage<int64_t, RawRecord>(
      threads, control, read_stats, options.workers, tickets, records,
      [this](int64_t index, auto& emit) {
        RawRecord record;
        try {
          record = dataset.read(index);
        } catch (const Error&) {
          if (!skip_bad(options)) throw;
          skipped.fetch_add(1, std::memory_order_relaxed);
          return;
        }
        emit(std::move(record));
      },
      index_of_ticket);
  if (fused)
    start_decode_augment();
  else
    start_decode_then_augment();
  threads.emplace_back([this] { run_shuffle(); });
  set_thread_name(threads.back(), "ech-shuffle");
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
    const double capacity = stage->workers * items / busy_s;
    rate = rate == 0 ? capacity : std::min(rate, capacity);
  }
  return rate;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  ECH_CHECK(dataset_ != nullptr, "Loader: dataset is null");
  ECH_CHECK(dataset_->size() >= 1, "Loader: dataset '", dataset_->name(), "' is empty");
  ECH_CHECK(options_.batch_size >= 1, "Loader: batch_size ", options_.batch_size, " < 1");
  ECH_CHECK(options_.workers >= 1 && options_.workers <= 256, "Loader: workers ", options_.workers,
            " not in [1, 256]");
  ECH_CHECK(options_.ring_capacity >= 1, "Loader: ring_capacity ", options_.ring_capacity, " < 1");
  ECH_CHECK(std::isfinite(options_.echo_factor) && options_.echo_factor >= 1.0,
            "Loader: echo_factor ", options_.echo_factor, " must be >= 1");
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
  impl_->start();
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
  if (!impl.control.error()) batch = impl.batches.pop();
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
    stage.ring_occupancy = static_cast<int64_t>(occupancy);
    stage.ring_capacity = static_cast<int64_t>(capacity);
    s.stages.push_back(stage);
  };
  add(impl.source_stats, impl.tickets.size(), impl.tickets.capacity());
  add(impl.read_stats, impl.records.size(), impl.records.capacity());
  if (impl.fused) {  // one stage, "decode+augment", writing the augment stage's ring
    add(impl.decode_stats, impl.samples.size(), impl.samples.capacity());
  } else {
    add(impl.decode_stats, impl.decoded.size(), impl.decoded.capacity());
    add(impl.augment_stats, impl.samples.size(), impl.samples.capacity());
  }
  add(impl.shuffle_stats, impl.shuffled.size(), impl.shuffled.capacity());
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
