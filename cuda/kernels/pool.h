// Launchers of cuda/kernels/pool.cu: same names and arguments as tensor/cpu/pool.h, float only,
// device pointers, plus the stream. Average backward gathers per input pixel (deterministic);
// max backward scatters through argmax with atomicAdd (float sums in any order).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/pool.h>

namespace echelon::cuda {

// relu_first: max_pool2d(relu(x)) without storing relu(x); its CPU twin is that composition.
void max_pool2d_forward(const Pool2dGeometry& a, const float* x, float* y, int64_t* argmax,
                        bool relu_first, cudaStream_t stream);
void max_pool2d_backward(const Pool2dGeometry& a, const float* grad_out, const int64_t* argmax,
                         float* grad_in, cudaStream_t stream);
void avg_pool2d_forward(const Pool2dGeometry& a, const float* x, float* y, cudaStream_t stream);
void avg_pool2d_backward(const Pool2dGeometry& a, const float* grad_out, float* grad_in,
                         cudaStream_t stream);

}  // namespace echelon::cuda
