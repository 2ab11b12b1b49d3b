// Launchers of cuda/kernels/pool.cu: same names and arguments as tensor/cpu/pool.h (the twin of
// max_pool2d_backward_gather is max_pool2d_backward), float only, device pointers, plus the
// stream. Average backward and max backward with its window gather per input pixel
// (deterministic); max backward without it scatters through argmax with atomicAdd (float sums in
// any order).
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
// The same gradient, a's window being the forward's and every argmax inside its own window:
// gathered per input pixel, one kernel without a zero fill, bit-identical to the CPU twin
// cpu::max_pool2d_backward. relu_out (N, C, OH, OW; may be null): the pooled output of
// max_pool2d(relu(x)); terms pass only where relu_out > 0. An argmax outside its window is not
// checked: its term is dropped (nothing is written outside grad_in).
void max_pool2d_backward_gather(const Pool2dGeometry& a, const float* grad_out,
                                const int64_t* argmax, float* grad_in, const float* relu_out,
                                cudaStream_t stream);
void avg_pool2d_forward(const Pool2dGeometry& a, const float* x, float* y, cudaStream_t stream);
void avg_pool2d_backward(const Pool2dGeometry& a, const float* grad_out, float* grad_in,
                         cudaStream_t stream);

}  // namespace echelon::cuda
