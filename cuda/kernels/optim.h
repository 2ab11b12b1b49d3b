// Launchers of cuda/kernels/optim.cu: same names and arguments as tensor/cpu/optim.h, float
// only, device pointers, plus the stream.
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include <echelon/kernels/sgd.h>

namespace echelon::cuda {

// guard: a device scalar or null; while it is not finite the kernel updates nothing (decided on
// the device, so a training step need not read its loss back first). lr: a device scalar or null
// (then o.lr): a CUDA graph's replays read the rate of the moment instead of the captured one.
// ema: the parameter's moving average (o.ema_decay), or null.
void sgd_step(int64_t count, const SGDOptions& o, bool first_step, float* param, const float* grad,
              float* momentum_buf, cudaStream_t stream, const float* guard = nullptr,
              const double* lr = nullptr, float* ema = nullptr);

// One parameter of sgd_steps: its count elements of param, grad, momentum_buf (null when
// o.momentum == 0) and ema (null: no average).
struct SgdTensor {
  float* param = nullptr;
  const float* grad = nullptr;
  float* momentum_buf = nullptr;
  float* ema = nullptr;
  int64_t count = 0;
};
// sgd_step on every tensor of the list, with the same options, first_step, guard and lr: the same
// bits as sgd_step on each. One launch for up to 384 nonempty tensors (ResNet-110's 329), one
// more per 384 after that.
void sgd_steps(const std::vector<SgdTensor>& tensors, const SGDOptions& o, bool first_step,
               cudaStream_t stream, const float* guard = nullptr, const double* lr = nullptr);

}  // namespace echelon::cuda
