// Launchers of cuda/kernels/conv.cu ("ours": implicit GEMM, or im2col + our tiled GEMM): same
// names and arguments as the naive twins in tensor/cpu/conv.h, float only, device pointers, plus
// the stream. Scratch (columns, split-K partials) comes from the caching allocator of `device`.
#pragma once

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cuda {

// Process-wide, like set_float32_precision (cuda/kernels/matmul.h). ImplicitGemm (the default):
// our GEMM tiles gather straight from x / grad_out (cuda/kernels/conv_gemm.cu; the input
// gradient of layers with fewer than 8 input channels keeps the columns path). Im2colGemm: a
// columns buffer + our SGEMM, the baseline that tests/gpu/conv_gpu_test.cpp and
// bench/exp_gpu_kernels compare against. Either way the results match the CPU twin.
enum class ConvAlgorithm { ImplicitGemm, Im2colGemm };
void set_conv_algorithm(ConvAlgorithm algorithm);
ConvAlgorithm conv_algorithm();

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
// relu: y = ReLU(that): both algorithms clamp in their GEMM's store (the implicit GEMM's, and the
// columns path's gemm_strided_batched_row_bias epilogue); no pass over y.
void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, bool relu = false);
// y (count) = ReLU(y) in place, `y > 0 ? y : 0` as the ReLU twin (cuDNN's composed conv2d_relu
// forward).
void relu_inplace(float* y, int64_t count, cudaStream_t stream);
// Overwrites grad_in (N, C, H, W).
void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream);
// Overwrites grad_w (O, C, KH, KW).
void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream);
// Overwrites grad_bias (O).
void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          cudaStream_t stream);
// The ReLU's backward and the bias gradient of conv2d_relu in one pass over grad_out: masked
// (N, O, OH, OW) = grad_out * (relu_out > 0) (`relu_out > 0 ? g : 0`, the ReLU twin's) and
// grad_bias (O) = its sums, in conv2d_backward_bias's order (bit-identical to the two ops).
void conv2d_relu_backward_bias(const Conv2dGeometry& a, const float* grad_out,
                               const float* relu_out, float* masked, float* grad_bias,
                               cudaStream_t stream);

}  // namespace echelon::cuda
