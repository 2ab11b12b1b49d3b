// The training loop behind `echelon train` / `echelon eval`: datasets, the data loader, a
// StepEngine (parallel/engine.h), the LR schedule, per-epoch evaluation, progress display, and the
// run folder:
//   DIR/config.json              the options (resume reads them back)
//   DIR/metrics.jsonl            one JSON object per logged step and per epoch
//   DIR/summary.json             final numbers + the loader's echo stats (+ the engine's report)
//   DIR/checkpoint.safetensors   model (PyTorch names, OIHW), momentum buffers, epoch/step/seed
//   DIR/report.html              loss and accuracy curves as inline SVG
//
// Reproducibility: everything random is a pure function of (seed, epoch): model init from seed,
// the loader's shuffle/augmentation from (seed, epoch), dropout generators re-seeded at each
// epoch start. So a run resumed from the checkpoint after epoch k produces exactly the metrics of
// an uninterrupted run.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <echelon/app/metrics.h>
#include <echelon/base/json.h>
#include <echelon/data/dataset.h>
#include <echelon/data/registry.h>
#include <echelon/data/resident.h>
#include <echelon/data/transforms.h>
#include <echelon/parallel/engine.h>

namespace echelon::app {

// The run drives one of the parallel layer's engines (parallel/engine.h).
using parallel::EngineFactory;
using parallel::StepEngine;

// `--workers auto`: resolve_workers() picks 0 (inline) or 1 once the data set is loaded.
inline constexpr int kAutoWorkers = -1;
// The most loader workers per stage (data::Loader refuses more).
inline constexpr int kMaxWorkers = 256;
// The most --threads (train and bench): thousands of pool threads fail to start ("Resource
// temporarily unavailable") or crawl.
inline constexpr int kMaxThreads = 1024;

// A one-line warning when --threads asks for more pool threads than the machine's hardware
// threads (`hardware_threads`; 0: unknown, no warning), else "": the extra threads time-share the
// cores, and every op's parallel loop waits for its slowest share.
std::string threads_warning(int threads, unsigned hardware_threads);

// The loader's worker count a run uses, and why.
struct WorkersChoice {
  int workers = 1;
  std::string reason;  // "given" for an explicit count, else "auto: ..." naming the deciding fact
};
// An explicit count (>= 0) stays. kAutoWorkers: 0 when the data set is in memory
// (Dataset::in_memory), echo is not "auto" (inline has no upstream rate to match) and the device
// is the CPU; else 1 (threads overlap a file's decode, or the host-to-device copy, with the step).
// `dataset` may be null (a process that loads no data): 1.
WorkersChoice resolve_workers(int requested, const data::Dataset* dataset, const std::string& echo,
                              Device device);
// The --workers flag's text: "auto" -> kAutoWorkers, or a count >= 0; anything else throws
// echelon::Error naming the flag and the value.
int parse_workers(const std::string& text);

struct TrainOptions {
  std::string model = "lenet5";
  std::string data = "fashion-mnist";  // fashion-mnist | mnist | cifar10 | synthetic | folder
  std::string data_dir;                // empty: the dataset's default folder
  int64_t epochs = 10;
  int64_t batch_size = 64;
  double lr = 0.01;
  double momentum = 0.9;
  bool nesterov = false;
  double wd = 0.0;
  double ema = 0.0;  // --ema: decay of the weights' moving average, which is evaluated; 0: none
  std::string schedule = "constant";  // constant | step | multistep | cosine
  double warmup_epochs = 0;
  int64_t step_size = 30;           // schedule=step
  std::vector<int64_t> milestones;  // schedule=multistep
  double gamma = 0.1;               // step, multistep
  std::string device = "auto";      // auto | cpu | cuda | cuda:N
  std::string conv_impl = "ours";   // ours | cudnn
  std::string precision = "fp32";   // fp32 | tf32 | bf16 (matmul and conv compute on CUDA)
  uint64_t seed = 0;
  int threads = 0;         // BLAS threads; 0 = leave the library default
  std::string out;         // run folder; empty = no files written
  std::string resume;      // run folder to continue
  bool overwrite = false;  // allow --out to replace another run's folder (not saved in config.json)
  bool deterministic = false;
  bool autotune = false;  // ops::set_conv_autotune: time our CUDA conv kernels per shape
  bool fuse = true;       // fused layer pairs (ops::set_fused_ops); --no-fuse composes the ops
  int64_t limit_train = 0, limit_test = 0;  // 0 = whole split
  // Training augmentation: "default" (the data set's standard recipe: crop:4,flip for CIFAR-10,
  // none for the others), "none", or a comma list of crop:P and flip (data::parse_augment_spec).
  std::string augment = "default";
  // Image folders: shorter side to N, then an N x N crop (random for training, centred for test);
  // the model's input is N x N. 0: the folder's images must be square and of one size.
  int64_t resize = 0;
  // Data pipeline (data/loader.h).
  std::string echo = "1";  // E >= 1 or "auto"
  std::string echo_at = "after-augment";
  int64_t shuffle_buffer = 0;
  // Worker threads per data stage; 0: no threads, every stage runs inline on the training
  // thread inside Loader::next() (same batches as 1). Stages with several workers may hand
  // examples on in a different order from run to run, so only workers 0 and 1 are
  // bit-reproducible (see --deterministic); in-memory datasets need no more.
  // kAutoWorkers: resolve_workers() picks 0 or 1; config.json records the number it picked.
  int workers = kAutoWorkers;
  // The whole data set on the device, each batch gathered and augmented there by one kernel
  // (data/resident.h): no loader threads. Same batches as the loader with one worker; no echo,
  // shuffle buffer or --resize.
  bool resident_data = false;
  // > 0: stop after the first epoch whose test accuracy reaches this fraction, and report the
  // wall time from the start of the run (data loading and evaluation included) to it.
  double target_accuracy = 0;
  // Display and logging.
  int64_t log_every = 50;  // metrics.jsonl step records (and plain progress lines) every N steps
  std::string progress = "auto";  // auto | bar | lines | none
  // Testing aid: stop (as if interrupted) after this many epochs; 0 = run all.
  int64_t stop_after_epoch = 0;
  // The engine's flags (--pipeline, --ppv, --schedule-pipeline, ...; app/cli/pipeline_flags.h
  // writes and reads them), saved in config.json as the object "engine" so that --resume
  // continues with the same engine.
  json::Value engine = json::Value::object();
  // False on the processes of a multi-process run other than rank 0: they write no run folder
  // (rank 0 writes config, metrics, summary, report and the gathered checkpoint). Not saved.
  bool primary = true;
  // False on the processes of later pipeline partitions (rank % K > 0): partition 0's process
  // sends every mini-batch, with its labels, through the pipeline and rank 0 evaluates, so these
  // open no data set file (the model's input shape comes from the data set's description) and
  // build no loader. Not saved.
  bool loads_data = true;

  json::Value to_json() const;  // keys are the CLI flag names without "--"
  // Reads back to_json()'s object; missing keys keep defaults; errors name the key.
  static TrainOptions from_json(const json::Value& v);
};

// Throws echelon::Error naming the flag and the bad value: "--lr must be > 0 (got -1)".
void validate(const TrainOptions& options);
// "auto" -> cuda:0 when a device is usable, else cpu; validates "cuda:N" against the devices.
Device resolve_device(const std::string& text);

// The datasets a run uses, plus the shape of one example (data/registry.h).
using DataBundle = data::DatasetSplits;
// data::load_dataset(options.data, options.data_dir, {options.limit_train, options.limit_test}).
// Missing or corrupt files throw naming the file.
DataBundle load_data(const TrainOptions& options);

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};
// Mean loss and accuracy of `engine.predict` over a whole dataset, in order, batch by batch.
EvalResult evaluate(StepEngine& engine, std::shared_ptr<const data::Dataset> dataset,
                    const data::AugmentOptions& augment, int64_t batch_size, int workers,
                    Device device);
// The same over a resident test set (--resident-data), from its first batch.
EvalResult evaluate(StepEngine& engine, data::ResidentData& test);

struct TrainResult {
  std::vector<EpochRecord> epochs;
  std::vector<double> step_losses;  // every optimizer step's mean batch loss, in order
  json::Value summary;              // what summary.json holds
  bool completed = false;           // false when stopped early (stop_after_epoch / interrupt)
  // --target-accuracy: the wall time from the start of the run to the end of the evaluation that
  // first reached it, and that epoch (numbered from 1); 0 when not reached.
  double time_to_target_s = 0;
  int64_t target_epoch = 0;
};

// Runs the whole training described by `options` (validated first), writing progress to `out`.
// `factory` builds the step engine; empty = make_single_device_engine. Failures throw
// echelon::Error (bad data, non-finite loss naming the step and layer, bad checkpoint, ...).
TrainResult train(const TrainOptions& options, std::ostream& out,
                  const EngineFactory& factory = {});

// Options of `echelon eval`.
struct EvalOptions {
  std::string checkpoint;
  std::string data;      // empty: the dataset recorded in the checkpoint
  std::string data_dir;  // empty: recorded / default
  std::string device = "auto";
  int64_t batch_size = 256;
  int64_t limit_test = 0;
  // 0: inline; > 1 may reorder examples and change the loss in its last bits; kAutoWorkers:
  // resolve_workers() on the test split.
  int workers = kAutoWorkers;
  int threads = 0;  // CPU threads of the ops' pool, as train's --threads (0: its size as it is)
  // A --ema run's checkpoint is evaluated with its moving average of the weights (what its test
  // accuracy measured) unless this is set.
  bool live_weights = false;
};
// Loads the checkpoint's model and evaluates it on the test split; prints one summary line.
EvalResult evaluate_checkpoint(const EvalOptions& options, std::ostream& out);

// Asks a running train() to stop after the current step (async-signal-safe: sets a flag). The
// CLI calls it from its SIGINT handler; train() then returns with completed = false.
void request_stop();

}  // namespace echelon::app
