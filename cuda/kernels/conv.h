// Launchers of cuda/kernels/conv.cu ("ours": implicit GEMM, or im2col + our tiled GEMM): same
// names and arguments as the naive twins in tensor/cpu/conv.h, float only, device pointers, plus
// the stream. Scratch (columns, split-K partials) comes from the caching allocator of `device`.
#pragma once

#include <vector>

#include <cuda_runtime.h>

#include <echelon/cuda/kernels/conv_gemm.h>
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

// One pass of a convolution, its operands and where it runs: what the tuner
// (cuda/kernels/conv_tune.h) times its candidates on. Forward: y = out from x, w, bias, relu;
// grad input: grad_in = out from grad_out, w; grad weight: grad_w = out from grad_out, x. Every
// pass overwrites out and reads nothing else of it, except an accumulating grad input.
struct ConvCall {
  ConvPass pass = ConvPass::Forward;
  Conv2dGeometry geometry;
  const float* x = nullptr;
  const float* w = nullptr;
  const float* grad_out = nullptr;
  const float* bias = nullptr;
  bool relu = false;
  float* out = nullptr;
  // Grad input only: out += the gradient (out + value, one float add per element, in the store of
  // every path: implicit GEMM, phases, col2im; bit for bit the gradient then axpy_(out, it, 1)).
  // The autograd engine's gradient sum of a tensor (ops::conv2d_backward's input_sum).
  bool accumulate = false;
  // Grad weight only: where not null, the bias gradient (O) too: summed by the direct kernel in
  // its own pass over grad_out where it runs (wgrad_direct_sums_bias), else conv2d_backward_bias
  // after the weight gradient.
  float* grad_bias = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;
};
// What the call runs with tuning off: the columns path under Im2colGemm, for operands of 2^31+
// elements and for the input gradient of < 8 input channels; the direct kernel for the weight
// gradient where wgrad_direct_fits (conv_direct.h; unless set_conv_wgrad_direct(false)); the
// input gradient by phases where dgrad_phases_fit (conv_phases.h; unless
// set_conv_dgrad_phases(false)), with conv_gemm_heuristic of the largest phase; else
// conv_gemm_heuristic.
ConvConfig conv_heuristic(ConvPass pass, const Conv2dGeometry& a);
// The tuner's candidates: conv_gemm_candidates, preceded for a phased input gradient by those of
// the largest phase with ConvConfig::phases, the direct weight gradient where it fits (1 block,
// a quarter of the heuristic's blocks, the heuristic's, one per chunk), and the columns path
// (alone under Im2colGemm).
std::vector<ConvConfig> conv_candidates(ConvPass pass, const Conv2dGeometry& a);
// Runs the call with `config` (any of conv_candidates; the results match the CPU twin).
void run_conv(const ConvCall& call, const ConvConfig& config);

// The passes below run what conv_config_for (conv_tune.h) picks: the heuristic, or with
// set_conv_autotune the fastest candidate measured for the shape.
// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
// relu: y = ReLU(that): both algorithms clamp in their GEMM's store (the implicit GEMM's, and the
// columns path's gemm_strided_batched_row_bias epilogue); no pass over y.
void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, bool relu = false);
// y (count) = ReLU(y) in place, `y > 0 ? y : 0` as the ReLU twin (cuDNN's composed conv2d_relu
// forward).
void relu_inplace(float* y, int64_t count, cudaStream_t stream);
// Overwrites grad_in (N, C, H, W), or with accumulate adds the gradient to it
// (ConvCall::accumulate).
void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream,
                           bool accumulate = false);
// Overwrites grad_w (O, C, KH, KW), and grad_bias (O) when not null (ConvCall::grad_bias).
void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream,
                            float* grad_bias = nullptr);
// Whether conv2d_backward_weight sums the bias gradient in the direct kernel with tuning off
// (ConvCall::grad_bias): conv2d_relu's backward then applies the ReLU's mask on its own rather
// than with the bias (conv2d_relu_backward_bias), so that it sums the bias as --no-fuse does.
bool conv2d_backward_weight_sums_bias(const Conv2dGeometry& a);
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
