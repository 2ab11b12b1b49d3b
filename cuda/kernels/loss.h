// Launchers of cuda/kernels/loss.cu: same names and arguments as tensor/cpu/loss.h, float only,
// device pointers, plus the stream.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace echelon::cuda {

// Like the twin, returns the first row whose target is outside [0, C), or -1. It has to read
// that answer back, so it synchronizes `stream` (a loss is read on the host every step anyway).
int64_t cross_entropy_forward(int64_t n, int64_t classes, const float* logits,
                              const int64_t* target, float* log_probs, float* loss, int device,
                              cudaStream_t stream);
// grad_loss is a device scalar (no host round trip in backward).
void cross_entropy_backward(int64_t n, int64_t classes, const float* grad_loss,
                            const float* log_probs, const int64_t* target, float* grad_logits,
                            cudaStream_t stream);

}  // namespace echelon::cuda
