// Launchers of cuda/kernels/loss.cu: same names and arguments as tensor/cpu/loss.h, float only,
// device pointers, plus the stream.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace echelon::cuda {

// Like the twin, returns the first row whose target is outside [0, C), or -1. It has to read
// that answer back, so it synchronizes `stream`, unless deferred target checks are on: then it
// never waits (returns -1) and a bad target is recorded on the device for
// check_deferred_target_errors, so that a training step runs without a host synchronisation; the
// loss of a batch with a bad target is then NaN. Where cross_entropy_one_block_fits, the kernel
// may do more: unit_grad (n, classes), when given, receives the logits' gradient for a unit loss
// gradient, cross_entropy_backward's bits with grad_loss 1; correct and guard, when given, the
// step's statistics, step_statistics' values (correct[0] = the rows whose argmax is the target,
// guard[0] += 0 * loss[0]).
int64_t cross_entropy_forward(int64_t n, int64_t classes, const float* logits,
                              const int64_t* target, float* log_probs, float* loss, int device,
                              cudaStream_t stream, float* unit_grad = nullptr,
                              float* correct = nullptr, float* guard = nullptr);
// Whether cross_entropy_forward runs as one kernel of one block (LeNet-5's 128 x 10 does); else a
// kernel of a block per row and a one-block kernel for the mean.
bool cross_entropy_one_block_fits(int64_t n, int64_t classes);
// Deferred target checks (off by default; process-wide). A step engine with device-side stats
// (parallel::DeferredStats) turns them on around each training step
// (parallel::ScopedDeferredTargetChecks), and calls check_deferred_target_errors where it
// synchronises anyway (when it reads the loss, once per log interval).
void set_deferred_target_checks(bool on);
bool deferred_target_checks();
// Throws echelon::Error naming the first bad target (row, value, class count) that a cross-entropy
// launch whose work has COMPLETED recorded since the last call, and clears it; no-op otherwise.
// Never synchronises: call it after a synchronisation to cover everything queued before.
void check_deferred_target_errors();

// grad_loss is a device scalar (no host round trip in backward).
void cross_entropy_backward(int64_t n, int64_t classes, const float* grad_loss,
                            const float* log_probs, const int64_t* target, float* grad_logits,
                            cudaStream_t stream);

}  // namespace echelon::cuda
