// The step engine seam: how one mini-batch turns into a parameter update. The trainer owns the
// loop — epochs, LR schedule, evaluation, logging, checkpoints — and hands every batch to a
// StepEngine. There is one implementation, the pipeline engine (parallel/pipeline.h): it splits the
// model into partitions on worker threads/devices, and ordinary single-device training (forward,
// loss, backward, SGD step) is its 1-partition case, run inline on the caller's thread.
//
// Contract for every engine:
//  - train_step() may be asynchronous: it returns the stats of the mini-batches that COMPLETED
//    during the call (0 while a pipeline fills, possibly several later). finish_epoch() drains
//    everything still in flight, so after it every batch of the epoch has updated the weights,
//    and evaluation and checkpoints see final parameters.
//  - Non-finite loss: the engine does not apply that batch's update, reports finite = false and
//    the Batch::index of the offending batch; the trainer stops and diagnoses the first layer
//    whose output is non-finite by re-running the forward layer by layer on that batch.
//  - model() is the whole model (all partitions share these parameter tensors); optimizer state
//    uses PyTorch-like names "momentum_buffer.<parameter name>" so a checkpoint written by one
//    engine resumes under another.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/data/loader.h>
#include <echelon/kernels/sgd.h>
#include <echelon/layers/sequential.h>
#include <echelon/layers/state_dict.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parallel {

class TraceRecorder;

// What the trainer reports per step; engines sum over the mini-batches that completed.
struct StepStats {
  int64_t batches = 0;  // mini-batches whose results are included (0 while a pipeline fills)
  int64_t samples = 0;  // examples in them
  double loss_sum = 0;  // sum over those batches of (mean batch loss * batch size)
  int64_t correct = 0;  // training predictions equal to the label (argmax of the logits)
  bool finite = true;   // false: a non-finite loss was seen and that update was not applied
  int64_t nonfinite_batch = -1;  // Batch::index of the batch with the non-finite loss

  void add(const StepStats& other);
  double mean_loss() const { return samples ? loss_sum / static_cast<double>(samples) : 0.0; }
  double accuracy() const {
    return samples ? static_cast<double>(correct) / static_cast<double>(samples) : 0.0;
  }
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;
  // Short name for logs and summary.json: "single", "pipeline:stale", ...
  virtual std::string name() const = 0;

  // One mini-batch: images (B, C, H, W) float32, labels (B) int64 (on the loader's device).
  virtual StepStats train_step(const data::Batch& batch) = 0;
  // Drains in-flight mini-batches at the end of an epoch and returns their stats.
  virtual StepStats finish_epoch() = 0;
  // Learning rate for the following steps.
  virtual void set_lr(double lr) = 0;
  // The sync-free step (deferred_stats.h), for the single-device engine on a GPU: train_step then
  // never waits for the device; it returns 0 batches until `interval` (>= 1) mini-batches have
  // run, then all of them at once (one synchronisation), and finish_epoch and predict return
  // the rest. A bad label or a non-finite loss is raised or reported at that read, not at its
  // step. Other engines and devices ignore it and read every step. Call before the first step.
  virtual void defer_step_stats(int64_t interval) { (void)interval; }

  // The whole model (parameters shared with the engine's partitions).
  virtual Sequential& model() = 0;
  // Logits (N, classes) for images (N, C, H, W), in eval mode and without autograd; restores
  // the training mode afterwards.
  virtual Tensor predict(const Tensor& images) = 0;

  // Optimizer state as SGD::state_dict() writes it: "momentum_buffer.<parameter name>" -> tensor
  // (host or device) and "step". A pipeline merges its partitions' SGD states (names are unique).
  virtual StateDict optimizer_state() const = 0;
  // Restores it; throws echelon::Error naming the key when a name or shape does not match.
  virtual void load_optimizer_state(const StateDict& state) = 0;
  // On --resume: the run already finished `epochs_done` epochs. Engines whose behaviour depends on
  // the epoch (the hybrid pipeline switches to sequential at an epoch) continue where it stopped;
  // call before the first train_step.
  virtual void continue_after_epochs(int epochs_done) { (void)epochs_done; }
  // Multi-process runs (one process per partition, pipeline_dist.cpp). Only the processes of
  // partition 0 take mini-batches: partition 0 sends each one, with its labels, through the
  // pipeline. A process of a later partition returns false here: its trainer loads no data and
  // runs each epoch with follow_epoch() instead of train_step() and finish_epoch().
  virtual bool takes_batches() const { return true; }
  // One epoch that partition 0's process feeds, until its finish_epoch(): the stats of every
  // mini-batch of it (what that process's train_step and finish_epoch calls returned together).
  virtual StepStats follow_epoch();
  // Whether this process evaluates: in a multi-process run rank 0 alone (it holds every
  // partition's weights after finish_epoch), which then shares its numbers (share_evaluation).
  virtual bool evaluates() const { return true; }
  // Called by every process after each evaluation (by the ones that evaluated, after it):
  // `metrics` becomes rank 0's in every process, and no partition runs a later mini-batch before
  // every process has called it (a process that evaluated read the very layers its partition
  // trains). One process: nothing to do.
  virtual void share_evaluation(std::vector<double>& metrics) { (void)metrics; }
  // Engine-specific block for summary.json (pipeline: per-partition busy/idle, staleness, ...);
  // null when there is nothing to add.
  virtual json::Value report() const = 0;
  // The Chrome trace this engine records into (parallel/trace.h), or null when not tracing: the
  // trainer and the data loader add their tracks to it, on its clock.
  virtual TraceRecorder* trace_recorder() { return nullptr; }
};

// Ordinary training, named "single": forward, cross-entropy loss, backward, SGD step, all on
// `device` (the model is moved there at the first batch), on the caller's thread. A non-finite
// loss skips backward and the update. It is the pipeline engine with one partition, run inline.
std::unique_ptr<StepEngine> make_single_device_engine(std::shared_ptr<Sequential> model,
                                                      const SGDOptions& sgd, Device device);

// How the trainer builds its engine; the CLI swaps in the pipeline engine's factory.
using EngineFactory = std::function<std::unique_ptr<StepEngine>(
    std::shared_ptr<Sequential> model, const SGDOptions& sgd, Device device)>;

}  // namespace echelon::parallel
