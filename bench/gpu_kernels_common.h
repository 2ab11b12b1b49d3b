// What exp_gpu_kernels.cpp (the yardstick rows), gpu_kernels_ab.cpp (the A/B rows of the
// kernels' switches) and exp_gpu_profile.cpp (one call of each kernel, for ncu) share: the
// timing helpers, random inputs (gpu_kernels_common.cpp) and the conv shapes. CUDA builds only.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <echelon/kernels/conv.h>
#include <echelon/tensor/tensor.h>

namespace gpu_kernels {

using echelon::Precision;
using echelon::Shape;
using echelon::Tensor;

extern int g_repeats;     // timings per row (--repeats), the median is kept
extern int g_conv_calls;  // conv calls per graph replay (--conv-calls); 0: sized per layer

// A CUDA tensor of U[-0.5, 0.5) from `seed`.
Tensor random_cuda(const Shape& shape, uint64_t seed);

// Median milliseconds of `body` over g_repeats runs, after a warm-up (allocator, handles, cuDNN
// plan).
double median_ms(const std::function<void()>& body);

// The SGEMM rows' problems: square NN at each size, then at the middle size TN and NN with rows
// one element longer (ld + 1: no 16-byte vectors, no cp.async), each as measure(layout, size, a,
// b, trans_a) with op(a) (s, s) and b (s, s).
using GemmMeasure = std::function<void(const char* layout, int64_t s, const Tensor& a,
                                       const Tensor& b, bool trans_a)>;
void for_each_gemm_problem(const std::vector<int64_t>& sizes, const GemmMeasure& measure);

// One conv layer of the four nets: x (N, C, H, W), w (O, C, KH, KW), square stride and padding;
// `count`: how many of the net's layers have this shape.
struct ConvShape {
  const char* net;
  Shape x, w;
  int64_t stride, pad;
  int count;

  echelon::Conv2dGeometry window() const;  // the caller's part: kernel, stride, padding
  echelon::Conv2dGeometry full() const;    // window() for x and w
  // "resnet20 C=16   O=32   32x32 3x3/2": net, channels in and out, input size, kernel and
  // (when not 1) stride; the A/B rows' first columns.
  std::string label() const;
};

// Every distinct conv layer of LeNet-5 (1x28x28), ResNet-20, AlexNet and VGG-16 (3x32x32) at
// `batch`, in the order the nets run them, read from the model zoo (make_model): the stride-2
// layers included, repeats counted in `count`.
std::vector<ConvShape> net_conv_shapes(int64_t batch);

// Per-call time of `body` from a replayed CUDA graph of `calls` calls (exp_gpu_kernels.cpp);
// graph: false when the capture failed and the calls ran eagerly.
struct PerCall {
  double ms;
  int calls;
  bool graph;
};
PerCall per_call_ms(const std::function<void()>& body);

// ---- gpu_kernels_ab.cpp: each prints its rows ----
void wgrad_sweep_rows(const std::vector<ConvShape>& shapes);
void wgrad_direct_rows(const std::vector<ConvShape>& shapes, Precision precision);
// The direct weight gradient's x loads as cuda::wgrad_direct_x_load_wavefronts models them, dense
// vs padded, for the layers it takes: host arithmetic only, no GPU needed.
void direct_bank_rows(const std::vector<ConvShape>& shapes);
// What conv_heuristic picks for each layer and pass under fp32, TF32 and bf16 (cuda::to_string:
// the kernel, tile, table and split-K groups): host arithmetic only, no GPU needed.
void plan_rows(const std::vector<ConvShape>& shapes);
void dgrad_phases_rows(const std::vector<ConvShape>& shapes, Precision precision);
void window_rows(const std::vector<ConvShape>& shapes);
void gather_table_rows(const std::vector<ConvShape>& shapes, Precision precision);
void fma_core_rows(const std::vector<ConvShape>& shapes);
void mma_tile_rows(const std::vector<ConvShape>& shapes, Precision precision);
void mma_stages_gemm_rows(const std::vector<int64_t>& sizes);
void mma_async_k_gemm_rows(const std::vector<int64_t>& sizes);
void conv_async_k_rows(const std::vector<ConvShape>& shapes);
void conv_async_gather_rows(const std::vector<ConvShape>& shapes);
void autotune_rows(const std::vector<ConvShape>& shapes, Precision precision);

}  // namespace gpu_kernels
