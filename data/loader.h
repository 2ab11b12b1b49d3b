// The training loop's view of the data pipeline: Loader turns a Dataset into a stream of batches.
//
//   auto data = data::make_memory_dataset(data::load_fashion_mnist(dir, "train"), "fashion-mnist");
//   data::LoaderOptions opts;  opts.batch_size = 64;  opts.echo_factor = 2;
//   data::Loader loader(data, opts);
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     while (auto batch = loader.next()) train_step(batch->images, batch->labels);
//   }
//   json::Value stats = loader.stats().to_json();
//
// Inside, a staged pipeline of worker threads joined by ring buffers (data/stages.h), or with
// workers = 0 the same stages run one after another inside next() (data/loader_inline.cpp):
// source (per-epoch seeded shuffle) -> read -> decode -> [echo: before-augment] -> augment
// -> [echo: after-augment] -> shuffle buffer -> batch -> [echo: batch] -> (device transfer).
// Decode and augment run as one fused stage when nothing sits between them and the dataset
// supports it (LoaderOptions::fuse_decode_augment). Not every stage is a thread: the first stage's
// workers claim indices from the epoch's order (no source thread), an in-memory data set is read
// by the decode workers (its read is a copy), and the shuffle buffer runs on the batch thread. An
// in-memory set with workers = 1 (batches on the CPU) runs the inline driver on one thread, whose
// batches cross one ring to next(). The inline driver writes an in-memory set's examples straight
// into the batch (Dataset::read_into) when nothing sits between decode+augment and batching (no
// shuffle buffer, no echo, no trace hook): same batches, no per-example buffers.
//
// Data echoing (Choi et al. 2019): when the consumer (a training step) is R times faster than the
// upstream stages, repeating each example e ~= R times keeps it busy. AN EPOCH COUNTS FRESH
// EXAMPLES: an epoch ends after every dataset example has entered the pipeline once, so with
// echo factor e an epoch yields about e * size() examples (size()/batch_size * e batches).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/data/dataset.h>
#include <echelon/data/echo.h>
#include <echelon/data/transforms.h>
#include <echelon/tensor/tensor.h>

namespace echelon::data {

enum class EchoPlacement : uint8_t { BeforeAugment, AfterAugment, Batch };
const char* echo_placement_name(
    EchoPlacement placement);  // "before-augment", "after-augment", "batch"
// Parses "before-augment" | "after-augment" | "batch"; throws echelon::Error naming the text.
EchoPlacement parse_echo_placement(const std::string& text);

enum class OnBadSample : uint8_t { Fail, Skip };
OnBadSample parse_on_bad_sample(const std::string& text);  // "fail" | "skip"

// The largest fixed echo factor. Choi et al. gain up to e ~ 4-8 (echo auto stays in [1, 8]); at
// e = 1000 each fresh example is already trained on a thousand times per epoch, so a larger factor
// is a typo (--echo 1e6 ran for days with no sign of life), and the bound keeps an epoch's step
// count (fresh batches x e) far inside int64 (--echo 1e300 overflowed it and trained no step).
inline constexpr double kMaxEchoFactor = 1000;

struct LoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;     // per-epoch shuffle of the dataset order, seeded by (seed, epoch)
  bool drop_last = false;  // drop the last, smaller batch of an epoch
  uint64_t seed = 0;
  // Worker threads of each of the read, decode and augment stages (an in-memory data set's read
  // runs in the decode workers). 0: inline, no threads at all:
  // next() runs every stage on the calling thread (PyTorch's num_workers=0), with the batches of
  // workers = 1 bit for bit; not with echo_auto (no parallel upstream to match).
  int workers = 2;
  int64_t ring_capacity = 64;  // items per ring between stages (rounded up to a power of two)

  // Echoing. echo_factor e in [1, kMaxEchoFactor]; the fractional part repeats an example once more
  // with that probability (seeded Bernoulli). echo_auto: measure R and set e ~= R in [1, 8] (EMA).
  double echo_factor = 1.0;
  bool echo_auto = false;
  EchoPlacement echo_at = EchoPlacement::AfterAugment;
  // Shuffle buffer after the echo stage (items); spreads echo copies apart. 0 = off.
  int64_t shuffle_buffer = 0;

  AugmentOptions augment;
  // Decode and augment as one stage, "decode+augment" (Dataset::decode_augment: JPEG rows go
  // straight into augmented floats), where the dataset supports it (an image folder without
  // --resize or crop_to) and echo is not placed before augmentation. Bit-identical batches;
  // false forces the separate stages (tests, benchmarks).
  bool fuse_decode_augment = true;
  OnBadSample on_bad_sample = OnBadSample::Fail;

  // Where batches land. CUDA: batches are built in pinned host memory, then copied asynchronously
  // on a copy stream, with `prefetch_batches` in flight (CUDA builds only; a CPU-only build
  // throws for a CUDA device).
  Device device = Device::cpu();
  int prefetch_batches = 2;

  // Timeline hook (a Chrome trace): called by every loader worker after each item it worked on,
  // with the stage ("read", "decode", "augment" or the fused "decode+augment", "shuffle" when
  // shuffle_buffer > 0, "batch", "transfer"), the worker's index in its stage, the item (dataset
  // index; arrival number for shuffle, batch number for batch and transfer) and the work's start
  // and end. Called from many threads at once (inline: from the thread calling next(), worker 0);
  // empty: no calls.
  using WorkHook = std::function<void(const std::string& stage, int worker, int64_t item,
                                      std::chrono::steady_clock::time_point start,
                                      std::chrono::steady_clock::time_point end)>;
  WorkHook on_work;

  // Parses an echo factor: a number in [1, kMaxEchoFactor], or "auto". Sets echo_factor /
  // echo_auto.
  void set_echo(const std::string& text);
};

struct Batch {
  Tensor images;      // (B, C, H, W) float32, on LoaderOptions::device
  Tensor labels;      // (B) int64, on LoaderOptions::device
  int64_t fresh = 0;  // examples in this batch that are first copies (not echoes)
  int64_t index = 0;  // batch number within the epoch, from 0
};

// One stage of the loader (not a pipeline-parallel stage: that is parallel::StageStats).
struct LoaderStageStats {
  std::string name;  // "read", "decode", "augment" (or "decode+augment"), "shuffle", "batch", ...
  int workers = 0;
  int64_t items = 0;           // items this stage emitted
  double busy_s = 0;           // summed over workers: time spent doing the work
  double stall_s = 0;          // summed over workers: time blocked on an empty input / full output
  double rate = 0;             // items per second of wall time since the epoch started
  int64_t ring_occupancy = 0;  // items waiting in this stage's output ring (at stats() time)
  int64_t ring_capacity = 0;
};

struct LoaderStats {
  EchoPlacement placement = EchoPlacement::AfterAugment;
  bool echo_auto = false;
  double factor = 1.0;            // configured e (or the current auto value)
  double effective_factor = 1.0;  // (fresh + echoed) / fresh so far
  int64_t fresh = 0;              // examples emitted as first copies (this epoch)
  int64_t echoed = 0;             // extra copies emitted by echoing (this epoch)
  int64_t skipped = 0;            // bad samples skipped (on_bad_sample = skip)
  int64_t batches = 0;            // batches handed to the consumer (this epoch)
  double upstream_rate = 0;       // fresh items/s the upstream stages can produce
  double downstream_rate = 0;     // items/s the consumer can take (time outside next())
  double measured_R = 0;          // downstream_rate / upstream_rate
  double consumer_stall_s = 0;    // time the consumer waited inside next()
  double elapsed_s = 0;           // wall time since start_epoch
  std::vector<LoaderStageStats> stages;
  json::Value to_json() const;  // one JSON object, for summary.json / logs
};

class Loader {
 public:
  // Validates the options (batch_size >= 1, echo_factor >= 1, workers >= 0, ...) and throws
  // echelon::Error naming the option. Starts no threads until start_epoch() (none inline).
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();  // stops and joins every thread, also mid-epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts epoch `epoch` (any previous epoch still running is stopped first). The shuffle order
  // and all augmentation draws are seeded by (seed, epoch).
  void start_epoch(int64_t epoch);
  // The next batch, or nullopt at the end of the epoch. Rethrows the first error of any stage
  // as an echelon::Error naming the stage and the item index (after all threads are joined).
  std::optional<Batch> next();
  // Asks every stage to stop (safe from another thread or a signal-handling thread); next()
  // then returns nullopt.
  void request_stop();

  LoaderStats stats() const;
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }
  // Batches a full epoch yields without echoing: ceil(size / batch_size) (or floor, drop_last).
  int64_t batches_per_epoch_fresh() const;

 private:
  struct Impl;
  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  std::unique_ptr<Impl> impl_;
  AutoEcho auto_echo_;  // echo = auto: consumer-side controller, carried from epoch to epoch
};

}  // namespace echelon::data
