// The split-K passes' deterministic second passes (conv_gemm.h): sum_groups, where the weight
// gradients of the implicit GEMM (conv_gemm.cu), of the columns path (conv.cu) and of the direct
// kernel (conv_direct.cu, with the bias's partials as its tail) add their groups' partial sums;
// sum_split, where the implicit GEMM's split-K forward (with the bias and the ReLU) and grad input
// (accumulating or not) add theirs. CPU twin: none of their own; they are internal to those
// passes, checked through their results against the naive convolution (tensor/cpu/conv.cpp:
// cpu::conv2d_forward, cpu::conv2d_backward_input, cpu::conv2d_backward_weight and
// cpu::conv2d_backward_bias) in tests/gpu/conv_gpu_test.cpp.
#include <echelon/cuda/kernels/conv_gemm.h>

#include <climits>

#include <echelon/base/error.h>
#include <echelon/cuda/launch.h>
#include <echelon/kernels/fast_div.h>

namespace echelon::cuda {
namespace {

// out (count) = [out +] sum over g of partial (groups, count). A block takes 32 columns at a
// time: warp w adds groups w, w + kSumWarps, ... in order (one 128-byte row per load, kSumWarps
// rows in flight per block), then warp 0 adds the warps' sums in warp order. Why: one thread per
// column adding all groups in a chain left LeNet-5's 150-weight gradient on one block walking 262
// partials (bench/RESULTS.md, session 32). Deterministic: the order depends only on `groups`.
constexpr int kSumWarps = 8;
__global__ void __launch_bounds__(kSumWarps * 32)
    sum_groups_kernel(const float* partial, int64_t groups, int64_t count, bool accumulate,
                      float* out, int64_t head, float* tail) {
  __shared__ float sums[kSumWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t base = blockIdx.x * int64_t{32}; base < count; base += gridDim.x * int64_t{32}) {
    const int64_t i = base + lane;
    float total = 0.0f;
    if (i < count)
#pragma unroll 4
      for (int64_t g = warp; g < groups; g += kSumWarps) total += partial[g * count + i];
    sums[warp][lane] = total;
    __syncthreads();
    if (warp == 0 && i < count) {
      float* const dst = i < head ? out + i : tail + (i - head);
      float sum = accumulate ? *dst : 0.0f;
      for (int w = 0; w < kSumWarps; ++w) sum += sums[w][lane];
      *dst = sum;
    }
    __syncthreads();  // sums[] is reused by the next 32 columns
  }
}

// out[i] = sum over g in order of partial[g * count + i], + bias[channel of i], then clamped
// (relu) or added to out (accumulate). One element a thread, grid-strided: the forward's and grad
// input's outputs are large and their groups few (<= 8 from the heuristic and the tuner), so
// each element's groups are one chain of coalesced loads.
__global__ void sum_split_kernel(const float* __restrict__ partial, int groups, int count,
                                 const float* __restrict__ bias, FastDiv by_plane,
                                 FastDiv by_channels, bool relu, bool accumulate,
                                 float* __restrict__ out) {
  for (int64_t i = grid_start(); i < count; i += grid_step()) {
    float sum = 0.0f;
    for (int g = 0; g < groups; ++g) sum += partial[g * int64_t{count} + i];
    if (bias) sum += bias[by_channels.mod(by_plane.div(static_cast<int>(i)))];
    if (relu) sum = sum > 0.0f ? sum : 0.0f;
    out[i] = accumulate ? out[i] + sum : sum;
  }
}

}  // namespace

void sum_split(const float* partial, int64_t groups, int64_t count, const float* bias,
               int64_t channels, int64_t plane, bool relu, bool accumulate, float* out,
               cudaStream_t stream) {
  if (count <= 0) return;
  ECH_CHECK(count <= INT_MAX && groups <= INT_MAX && channels > 0 && plane > 0 &&
                channels <= INT_MAX && plane <= INT_MAX,
            "sum_split: ", groups, " groups of ", count, " elements (", channels, " channels of ",
            plane, ") exceed the kernel's 32-bit indices");
  ECH_LAUNCH(grid_for(count), kBlock, 0, stream, sum_split_kernel)
  (partial, static_cast<int>(groups), static_cast<int>(count), bias,
   FastDiv(static_cast<int>(plane)), FastDiv(static_cast<int>(channels)), relu, accumulate, out);
  ECH_CUDA_CHECK_LAUNCH("sum_split");
}

void sum_groups(const float* partial, int64_t groups, int64_t count, bool accumulate, float* out,
                cudaStream_t stream, float* tail, int64_t head) {
  if (count <= 0) return;
  ECH_LAUNCH(grid_for(count, 32), kSumWarps * 32, 0, stream, sum_groups_kernel)
  (partial, groups, count, accumulate, out, tail ? head : count, tail);
  ECH_CUDA_CHECK_LAUNCH("sum_groups");
}

}  // namespace echelon::cuda
