// The parts train() builds a run from, each a function of TrainOptions (the LR schedule, the SGD
// options, the loader's options, the process-wide switches a run sets), and the helpers the run
// calls on its way: dropout re-seeding (a resumed run draws the masks an uninterrupted one
// would), metrics.jsonl's cut-back on --resume, and the diagnosis of a non-finite loss.
// Internal to app/ (train.cpp; bench.cpp lists the autotuner's picks too); split from train.cpp
// to keep the run's sequence readable on its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <echelon/app/train.h>
#include <echelon/base/json.h>
#include <echelon/data/loader.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/optim.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/trace.h>
#include <echelon/tensor/ops.h>

namespace echelon::app::run_setup {

// Where a run's time went before its first step (summary.json "startup"; printed with
// --target-accuracy, where it counts). The device's context is created on another thread while
// the data loads: device_s is that thread's time, device_wait_s what the run then still waited.
struct StartupTimes {
  double data_s = 0;         // reading and decoding the data set (both splits)
  double device_s = 0;       // creating the device's context (cuda::create_context; 0 on the CPU)
  double device_wait_s = 0;  // waiting for it after the data had loaded
  double model_s = 0;        // building the model (or restoring the checkpoint) and the engine
  double resident_s = 0;     // --resident-data: both splits to the device
  double first_step_s = 0;   // the first train_step call (host time; lazy kernel loading)
  double until_first_step_s = 0;  // from the start of the run to the first train_step call
  json::Value to_json() const;
  std::string line() const;  // "start-up: data 0.210 s, device 0.350 s (waited 0.140 s), ..."
};

// Dropout masks become a function of (seed, epoch, layer), so a resumed run draws the same ones.
// `counter` numbers the modules in visiting order (start it at 0).
void reseed_dropout(Module& module, uint64_t seed, int64_t epoch, uint64_t& counter);

// Re-runs the forward layer by layer to name the first layer whose output is non-finite.
std::string diagnose_nonfinite(Sequential& model, const Tensor& images);

// Keeps only the records of the first `epochs_done` epochs (a resumed run rewrites the rest).
void truncate_metrics(const std::string& path, int64_t epochs_done);

// --lr-schedule and its parameters over --epochs.
std::shared_ptr<LrSchedule> make_schedule(const TrainOptions& o);

// Every loader worker's items on the trace, one track per stage worker ("decode 1").
data::LoaderOptions::WorkHook loader_trace_hook(parallel::TraceRecorder& trace);

data::LoaderOptions loader_options(const TrainOptions& o, const data::AugmentOptions& augment,
                                   Device device, int workers);

SGDOptions sgd_config(const TrainOptions& o);

// What the convolution autotuner picked (ops::conv_tune_picks), an array of {shape, pass,
// precision, pick, tuned_ms, heuristic, heuristic_ms, candidates}; null when nothing was tuned.
json::Value conv_autotune_json();

// The process-wide switches a run sets (conv implementation, deterministic algorithms, fused
// layer pairs, float32 precision, conv autotuning, CPU threads), restored when the run ends, so
// train() leaves the process as it found it.
class ScopedRunSettings {
 public:
  explicit ScopedRunSettings(const TrainOptions& o);
  ~ScopedRunSettings();
  ScopedRunSettings(const ScopedRunSettings&) = delete;
  ScopedRunSettings& operator=(const ScopedRunSettings&) = delete;

 private:
  ops::ConvImpl conv_impl_;
  bool deterministic_;
  bool fused_ops_;
  Precision precision_;
  bool autotune_;
  int cpu_threads_;
};

}  // namespace echelon::app::run_setup
