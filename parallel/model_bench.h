// `echelon bench model` and `echelon bench pipeline`: a model's training step on synthetic
// batches, layer by layer (the layer profiler of --balance auto, parallel/balance.h) and whole,
// and a pipeline-parallel run's partitions (the engine's PartitionStats) against one worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/parallel/balance.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/parallel/timing.h>
#include <echelon/tensor/device.h>

namespace echelon::parallel {

// The model and its synthetic input (random images, labels i mod classes).
struct ModelInput {
  std::string model = "resnet20";
  int64_t batch_size = 32;
  int64_t channels = 0;    // 0: 1 for lenet5, 3 otherwise (the models' reference inputs)
  int64_t image_size = 0;  // 0: 28 for one channel, 32 otherwise
  int64_t classes = 10;
  uint64_t seed = 0;
  // Throws naming the option (batch_size, channels, ...) when a value is out of range.
  void validate() const;
  Shape image_shape() const;  // (batch, channels, size, size), defaults resolved
  std::shared_ptr<Sequential> make_model() const;  // initialised from `seed`
  // `count` mini-batches of random images on `device` (labels i mod classes), index 0, 1, ...
  std::vector<data::Batch> make_batches(Device device, int count) const;
};

// The optimizer of the benchmarked steps: SGD, lr 0.01, momentum 0.9.
SGDOptions bench_sgd_options();

struct ModelBenchOptions {
  ModelInput input;
  bool per_layer = false;
  bool split_blocks = false;  // per layer: each residual block as its four steps (--split-blocks)
  Device device = Device::cpu();
  int warmup = 1;
  int repeats = 5;
};

struct LayerBench {
  int64_t index = 0;
  std::string layer;  // the layer's describe()
  LayerProfile profile;
  // What --balance auto weighs: profile.cost(), except a --split-blocks piece's, which is scaled
  // so that its block's pieces sum to the block's own time (the pieces were timed with the copies
  // between them that only a cut pays; scale_pieces_to_blocks).
  double cost_s = 0;
  double share = 0;  // of the summed costs
};

struct ModelBenchResult {
  ModelInput input;
  Device device = Device::cpu();
  int threads = 0;
  TimingStats step;  // forward, loss, backward and SGD update of one mini-batch
  double images_per_s = 0;
  std::vector<LayerBench> layers;  // empty unless per_layer
  bool split_blocks = false;
  double layers_total_s = 0;  // sum of the layers' costs
  double pieces_total_s = 0;  // sum of their own forward + backward medians (split: copies too)
  json::Value to_json() const;
};

ModelBenchResult run_model_bench(const ModelBenchOptions& options);

struct PipelineBenchOptions {
  ModelInput input;
  PipelineOptions pipeline;
  Device device = Device::cpu();
  int warmup = 2;  // mini-batches before the measured window (pipeline filled and drained)
  int steps = 8;   // measured mini-batches
};

// One partition over the measured window (differences of the engine's counters).
struct PartitionBench {
  PartitionStats stats;  // busy_s, wait_s (bubble), send_s (transfer), counts: this window only
  double idle_s = 0;     // wall - busy - transfer: waiting for work, including the bubble
};

struct PipelineBenchResult {
  ModelInput input;
  Device device = Device::cpu();
  std::string engine;  // "pipeline:stale", ...
  std::vector<int64_t> cuts;
  std::vector<PartitionBench> partitions;
  int steps = 0;
  double wall_s = 0, images_per_s = 0;
  double single_wall_s = 0, single_images_per_s = 0;  // the same steps on one worker
  double speedup() const {
    return single_images_per_s > 0 ? images_per_s / single_images_per_s : 0;
  }
  json::Value engine_report;  // the engine's own summary.json block
  json::Value to_json() const;
};

PipelineBenchResult run_pipeline_bench(const PipelineBenchOptions& options);

}  // namespace echelon::parallel
