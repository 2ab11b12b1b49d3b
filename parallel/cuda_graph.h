// The captured training step (PipelineOptions::cuda_graph, `--cuda-graph`): the single-device
// engine on a GPU runs a few eager steps, then captures one whole step — forward, loss,
// backward, SGD — as a CUDA graph and replays it for every later batch of the same shape, so the
// host launches one graph instead of a few hundred kernels per step.
//
// What makes a replay the same computation as an eager step:
//  - inputs: every batch is copied into static device tensors that the graph reads;
//  - memory: the capture's allocations come from a private pool of the caching allocator
//    (cuda/allocator.h), so the addresses the graph names stay its own while it lives;
//  - per-step scalars reach it through device memory: the learning rate (SGD::keep_lr_on_device),
//    the non-finite guard and the deferred label checks (deferred_stats.h) are device scalars;
//    no value that changes between steps is a kernel argument;
//  - nothing inside the step waits for the device (the sync-free step, deferred_stats.h), which
//    capture requires; each replay's loss and correct count are copied out after it.
// A batch of another shape (the last partial one), evaluation and everything before the capture
// run eagerly. All of it runs on this object's stream, ordered after the caller's stream at the
// start of a step and before it at the end (events, no host synchronisation).
#pragma once

#if ECHELON_WITH_CUDA

#include <cstdint>
#include <functional>

#include <cuda_runtime.h>

#include <echelon/cuda/stream.h>
#include <echelon/tensor/device.h>

namespace echelon::parallel {

class CudaGraphStep {
 public:
  static constexpr int64_t kWarmupSteps = 2;  // eager steps of one shape before the capture

  explicit CudaGraphStep(Device device);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  cudaStream_t stream() const { return stream_.get(); }
  // The step's stream waits for the work queued so far on `caller`; leave(): the reverse.
  void enter(cudaStream_t caller);
  void leave(cudaStream_t caller);

  bool captured() const { return exec_ != nullptr; }
  // Captures `step` (which queues one training step on stream()) as the graph; nothing of it
  // runs. Throws echelon::Error naming the CUDA error when the capture fails (a host
  // synchronisation or another call that capture forbids inside the step).
  void capture(const std::function<void()>& step);
  void replay();  // queues the graph on stream()
  // Drops the graph and hands its memory back (after its last replay completed).
  void reset();

 private:
  Device device_;
  cuda::Stream stream_;
  cudaEvent_t entered_ = nullptr, left_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  uint64_t pool_ = 0;  // the allocator's capture pool, 0: none
};

}  // namespace echelon::parallel

#else

namespace echelon::parallel {
class CudaGraphStep {};  // a CPU-only build has no graphs (PipelineEngine refuses the option)
}  // namespace echelon::parallel

#endif  // ECHELON_WITH_CUDA
