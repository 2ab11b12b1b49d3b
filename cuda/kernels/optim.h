// Launchers of cuda/kernels/optim.cu: same names and arguments as tensor/cpu/optim.h, float
// only, device pointers, plus the stream.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/sgd.h>

namespace echelon::cuda {

void sgd_step(int64_t count, const SGDOptions& o, bool first_step, float* param, const float* grad,
              float* momentum_buf, cudaStream_t stream);

}  // namespace echelon::cuda
