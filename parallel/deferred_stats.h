// The sync-free training step (the single-device engine on CUDA). Reading a step's loss back to
// the host waits until the device has finished that step, so the host cannot queue the next one
// meanwhile and the GPU idles between steps. Here each step's loss and correct count stay on the
// device and are read together once every `interval` steps (the trainer's log interval) and at the
// end of an epoch: one host synchronisation per read, none inside a step.
//
// What a per-step read used to decide on the spot is kept on the device until the read:
//  - Non-finite loss: guard() (a float scalar, 0 while every loss so far was finite) turns NaN at
//    the first non-finite loss and stays NaN; the stage's SGD takes it as its guard
//    (SGD::set_guard), so that update and every later one up to the read leave the weights
//    unchanged. read() reports the first such batch (finite = false), as the per-step path does;
//    the trainer then diagnoses it on exactly the weights it met.
//  - Labels outside [0, classes): deferred target checks (cuda/kernels/loss.h) record them on the
//    device and make that batch's loss NaN (so its update is skipped as well); read() throws
//    naming the batch, the row, the label and the class range.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <echelon/parallel/stage.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parallel {

class DeferredStats {
 public:
  explicit DeferredStats(Device device);

  // What a step's cross_entropy counts for this object (ops::StepStatistics, ops.h): guard(), and
  // a fresh correct count on the logits' device: the loss's own kernel counts them where it can,
  // else step_statistics' (no host synchronisation either way).
  ops::StepStatistics next_statistics(const Tensor& logits) const;
  // Queues `meta`'s batch (id, index, samples; loss and correct are filled by read()): loss the
  // mean loss (scalar) and correct its count from next_statistics(), both on the device; labels
  // (N); classes, the logits' columns.
  void record(const BatchResult& meta, const Tensor& loss, const Tensor& correct,
              const Tensor& labels, int64_t classes);
  // float32 scalar on the device: NaN once a recorded loss was not finite (until the next read).
  const Tensor& guard() const { return guard_; }
  size_t pending() const { return pending_.size(); }
  // Waits for the device once and returns every recorded batch's result, in order; resets the
  // guard. Throws echelon::Error naming the batch when a label was out of range.
  std::vector<BatchResult> read();

  // CUDA graphs (cuda_graph.h): record() inside a capture queued tensors that every replay of the
  // graph rewrites. take_last_as_template() takes that entry back out; record_replay() queues a
  // copy of its current values (copied on the current stream, so after the replay queued there)
  // as batch `meta`.
  void take_last_as_template();
  void record_replay(const BatchResult& meta);

 private:
  struct Pending {
    BatchResult meta;
    Tensor loss;     // scalar
    Tensor correct;  // float32 scalar
    Tensor labels;   // (N), kept to name the batch of a bad label
    int64_t classes = 0;
  };
  [[noreturn]] void fail_on_bad_label(const std::vector<Pending>& read, const std::string& found);

  Device device_;
  Tensor guard_;
  std::vector<Pending> pending_;
  std::optional<Pending> template_;  // the captured step's entry
};

// Deferred target checks (cuda/kernels/loss.h) on for the lifetime of this object, off again (or
// as before) afterwards: the engine holds one around a training step. A no-op without CUDA.
class ScopedDeferredTargetChecks {
 public:
  ScopedDeferredTargetChecks();
  ~ScopedDeferredTargetChecks();
  ScopedDeferredTargetChecks(const ScopedDeferredTargetChecks&) = delete;
  ScopedDeferredTargetChecks& operator=(const ScopedDeferredTargetChecks&) = delete;

 private:
  [[maybe_unused]] bool previous_ = false;  // read in CUDA builds only
};

}  // namespace echelon::parallel
