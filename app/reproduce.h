// The two papers' headline experiments, one implementation for `echelon reproduce` (app/cli) and
// the experiment drivers (bench/exp_echo*.cpp, bench/exp_pipeline.cpp):
//   Choi et al. 2019, "Faster Neural Network Training with Data Echoing": fresh examples needed
//     to reach a test accuracy per echo factor and placement (echo_accuracy), and the wall-clock
//     speedup over e = 1 when the upstream is R times slower than the consumer (echo_speed).
//   Zhang & Abdelrahman 2019, "Pipelined Training with Stale Weights of Deep CNNs": 2-worker
//     speed (measure_speed), accuracy per schedule and cut (train_and_test), activation memory
//     of 4-stage pipelining vs PipeDream stashing (measure_memory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <echelon/app/train.h>
#include <echelon/base/json.h>
#include <echelon/data/loader.h>
#include <echelon/parallel/pipeline.h>

namespace echelon::app::reproduce {

// ---- data echoing ----------------------------------------------------------------------------

struct EchoSpeedRun {
  double seconds = 0;
  double factor = 0;        // e at the end of the run
  double first_factor = 0;  // e after the 2nd batch: echo = auto's first estimate
  double measured_ratio = 0;
};
// A synthetic upstream (2 workers, read cost slept, so it takes no CPU) `ratio` times slower
// than a consumer that sleeps `batch_ms` per batch of 16; wall time to `steps` consumer steps
// with echo factor `factor` (or echo = auto), after augmentation, shuffle buffer 64. The run of
// median time out of `reps` (sleeps overshoot on a loaded machine).
EchoSpeedRun echo_speed(double ratio, double factor, bool automatic, int steps, double batch_ms,
                        int reps);

struct EchoAccuracyConfig {
  uint64_t seed = 0;
  double target = 0.88;        // test accuracy to reach
  double cap_epochs = 6;       // give up after this many epochs of fresh examples
  int64_t eval_every = 15000;  // fresh examples between evaluations
  int64_t test_subset = 0;     // evaluate on the first N test images (0: all)
  int64_t limit_train = 0;     // train on the first N examples (0: all)
  int64_t shuffle_buffer = 1024;
  std::string data_dir;         // Fashion-MNIST folder (empty: the default)
  std::ostream* log = nullptr;  // one line per evaluation when set
};
struct EchoSets {
  DataBundle full;                                   // train (maybe limited) and whole test
  std::shared_ptr<const data::Dataset> test_subset;  // what the stopping rule evaluates on
};
// Fashion-MNIST with the experiment's augmentation (random crop, padding 2, horizontal flip).
EchoSets load_echo_sets(const EchoAccuracyConfig& config);

struct EchoAccuracyRun {
  bool reached = false;
  int64_t fresh = 0, steps = 0;  // fresh examples and optimizer steps consumed
  double accuracy = 0;           // the last evaluation (on test_subset)
  double full_accuracy = 0;      // on the whole test set at the end
  double seconds = 0;
};
// LeNet-5, SGD lr 0.01 momentum 0.9, batch 64, one loader worker (a reproducible data order);
// every eval_every fresh examples it evaluates and stops at the first accuracy >= target.
EchoAccuracyRun echo_accuracy(const EchoSets& sets, double factor, data::EchoPlacement placement,
                              const EchoAccuracyConfig& config);

// ---- stale-weight pipelining -----------------------------------------------------------------

struct Split {
  Tensor images;  // (N, 1, 28, 28) float32, normalised
  Tensor labels;  // (N) int64
  int64_t size() const { return labels.size(0); }
};
// The first `limit` examples of a Fashion-MNIST split, normalised with the training statistics.
Split load_split(const std::string& dir, const std::string& split, int64_t limit);

parallel::PipelineOptions pipeline_options(parallel::ScheduleKind schedule, const std::string& ppv,
                                           int partitions, bool balance, int micro_batches = 4);
SGDOptions sgd_config(double lr);  // momentum 0.9, weight decay 5e-4

// The flat index just after the n-th layer named `name` (n from 1): the paper counts layers with
// their activation fused, so its ppv maps to such a boundary of our flat model.
int64_t cut_after(const Sequential& model, const std::string& name, int n);
// Everything but the classifier (the last Linear) in partition 0: a deep cut.
int64_t cut_before_classifier(const Sequential& model);
// "1xConv2d 1xReLU 1xMaxPool2d": the layers [begin, end) by kind.
std::string layer_names(const Sequential& model, int64_t begin, int64_t end);

struct SpeedRow {
  std::string label;
  double images_per_s = 0, cpu_per_wall = 0;
  double balance_bound = 0;  // sum of the partitions' compute over the slowest one
  std::string ppv;
};
// Images/s of `timed` steps of random batches (1x28x28) after `warmup` steps.
SpeedRow measure_speed(const std::string& model_name, const std::string& label,
                       parallel::PipelineOptions options, int64_t batch_size, int warmup,
                       int timed);

struct AccuracyModel {
  std::string model;
  std::string paper_ppv;  // the paper's shallow placement, in its layer counting
  double paper_drop;      // the paper's accuracy drop (points) at that placement
  std::function<int64_t(const Sequential&)> shallow;
  int64_t train, test;  // examples used
  int epochs;
  int64_t batch;
  double lr;                 // peak of the cosine schedule
  double warmup_epochs = 0;  // linear warm-up from 0 to lr
};
// LeNet-5, AlexNet, VGG-16 (with batch norm) and ResNet-20 with the paper's shallow placement
// and the full-mode sizes.
std::vector<AccuracyModel> accuracy_models();

struct AccuracyResult {
  double train_acc = 0, test_acc = 0, seconds = 0;
};
// Trains with a cosine LR (peak m.lr, set every step) and tests the final weights. `seed` picks
// the initial weights and the order of the examples.
AccuracyResult train_and_test(const AccuracyModel& m, parallel::PipelineOptions options,
                              const Split& train, const Split& test, uint64_t seed);

struct MemoryRow {
  std::string cuts;  // the 4-stage cut (DP on profiled time), shared by stale and stash
  size_t base = 0, stale = 0, stash = 0;  // bytes held: non-pipelined, 4-stage stale, stash
  size_t weights = 0;  // parameters, gradients and momentum, held once by every schedule
};
// Five random mini-batches of `batch`; sums each partition's peak held activation bytes.
MemoryRow measure_memory(const std::string& model, int64_t batch);
// The paper's Table 9 memory increase (stale / PipeDream) for `model`, or "not found".
std::string paper_memory_increase(const std::string& model);

// ---- `echelon reproduce` ---------------------------------------------------------------------

enum class ReproduceSize { Full, Quick, Smoke };  // smoke: seconds, for tests
struct ReproduceOptions {
  std::string paper;  // echo | pipeline
  ReproduceSize size = ReproduceSize::Full;
  std::string data_dir;   // Fashion-MNIST folder (empty: the default)
  std::string json_path;  // also write the tables here (empty: no file)
};
// Runs the paper's experiments at `size`, prints the paper's table beside ours with what differs
// to `out`, writes json_path and returns the JSON.
json::Value reproduce_echo(const ReproduceOptions& options, std::ostream& out);
json::Value reproduce_pipeline(const ReproduceOptions& options, std::ostream& out);

}  // namespace echelon::app::reproduce
