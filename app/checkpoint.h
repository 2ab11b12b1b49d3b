// Training checkpoints in safetensors (tensor/safetensors.h). One file holds everything a resumed
// run needs:
//   "<param or buffer name>"              the model's state_dict, PyTorch names, OIHW weights
//   "optimizer.momentum_buffer.<name>"    SGD momentum buffers, "optimizer.step"
//   "trainer.epoch", "trainer.global_step", "trainer.seed"   int64 scalars
//   __metadata__: format, model, dataset, data_dir, in_channels, num_classes, image_size, epoch,
//                 global_step, seed, wall_s, config (JSON), history (JSON: per-epoch records),
//                 steps (JSON: sampled loss curve)
// tests/load_in_torch.py loads the model part into an equivalent PyTorch model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/app/metrics.h>
#include <echelon/base/json.h>
#include <echelon/layers/sequential.h>
#include <echelon/layers/state_dict.h>

namespace echelon::app {

inline constexpr const char* kCheckpointFormat = "echelon.checkpoint.v1";
inline constexpr const char* kCheckpointFile = "checkpoint.safetensors";
// The checkpoint of the epoch with the best test accuracy so far (the first of equals).
inline constexpr const char* kBestCheckpointFile = "checkpoint-best.safetensors";

struct CheckpointInfo {
  std::string model, dataset;
  std::string data_dir;                  // absolute, so eval finds it from another folder
  std::vector<std::string> class_names;  // label i's name; empty in checkpoints older than it
  int64_t in_channels = 0, num_classes = 0, image_size = 0;
  int64_t epoch = 0;  // epochs completed
  int64_t global_step = 0;
  uint64_t seed = 0;
  double wall_s = 0;  // training wall time so far, over all runs
  json::Value config = json::Value::object();
  std::vector<EpochRecord> history;
  std::vector<StepPoint> steps;
};

// Writes the checkpoint atomically (temp file, fsync, rename).
void save_checkpoint(const std::string& path, const Sequential& model,
                     const StateDict& optimizer_state, const CheckpointInfo& info);

struct LoadedCheckpoint {
  CheckpointInfo info;
  StateDict model_state;      // names as in the model
  StateDict optimizer_state;  // names without the "optimizer." prefix
};

// Reads and validates a checkpoint; every error names the file (damaged file, not an echelon
// checkpoint, missing metadata).
LoadedCheckpoint load_checkpoint(const std::string& path);

// Builds the model recorded in the checkpoint and loads its weights (strict). When
// `expected_model` is non-empty and differs from the recorded model, throws naming both.
std::shared_ptr<Sequential> restore_model(const LoadedCheckpoint& checkpoint,
                                          const std::string& path,
                                          const std::string& expected_model = "");

}  // namespace echelon::app
