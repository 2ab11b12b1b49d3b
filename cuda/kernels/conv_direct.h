// Launcher of cuda/kernels/conv_direct.cu: the weight gradient of a convolution whose filter is
// too small to fill a GEMM tile (LeNet-5's 6x1x5x5 and 16x6x5x5, ResNet-20's 16-channel 3x3
// layers, the first layer of every net), by a direct reduction over the output positions
// instead of the implicit GEMM's split-K (conv_gemm.h). ConvConfig::direct selects it; the
// heuristic (conv.cu, conv_heuristic) picks it wherever it applies, unless
// set_conv_wgrad_direct(false). Float only, device pointers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cuda {

// Whether the direct kernel takes this weight gradient: a kernel width of 3, 5 or 7 (one
// instantiation each), at most 2048 work items (ceil(O / 8) x C x KH: a thread's 8 output
// channels of one input channel and kernel row; up to 256 a block, blocks along y taking a share
// each: ResNet's 32- and 64-channel 3x3 layers, 384 and 1536), one output row's band of grad_out
// and x within its 32 KiB of shared memory, and 32-bit indices (conv_gemm_fits).
bool wgrad_direct_fits(const Conv2dGeometry& a);

// The heuristic's block count (each block sums a contiguous range of (image, band of output rows)
// chunks; the blocks' partial gradients are then added in block order by sum_groups): with the
// item groups along y, two per SM of an H200 (264), at most one per chunk.
int64_t wgrad_direct_groups(const Conv2dGeometry& a);
// The most blocks it can take: one per chunk.
int64_t wgrad_direct_most_groups(const Conv2dGeometry& a);

// grad_w (O, C, KH, KW) = sum over (n, oh, ow) of grad_out (N, O, OH, OW) at (n, o, oh, ow) times
// x (N, C, H, W) at (n, c, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw) (zero in the padding), on
// `groups` blocks (clamped to [1, wgrad_direct_most_groups], none empty). Under TF32 / bf16
// (float32_precision) the operands are rounded as they are staged, like the tensor-core tiles'.
// Deterministic for a given group count. Overwrites grad_w; and grad_bias (O) when not null, with
// the sums of grad_out over (n, oh, ow) (needs wgrad_direct_sums_bias).
void conv2d_backward_weight_direct(const Conv2dGeometry& a, int64_t groups, const float* grad_out,
                                   const float* x, float* grad_w, cudaStream_t stream,
                                   float* grad_bias = nullptr);
// Shared-memory wavefronts of the reduction's x loads, averaged over the warps of every item
// group (1: no bank conflict, 32: every lane on one bank), as the heuristic's plan lays out x's
// band (padded so that neighbouring work items read different banks, where a warp's lanes take
// one or two positions of an item), or with `padded` false the dense layout it had until session
// 45. A host-side model of the kernel's addressing, for tests and bench/RESULTS.md. Needs
// wgrad_direct_fits.
double wgrad_direct_x_load_wavefronts(const Conv2dGeometry& a, bool padded = true);

// Whether it also takes the bias gradient: under fp32 (float32_precision; its staged grad_out is
// rounded under TF32 / bf16), where it fits in one item group, with at most as many output
// channels as threads (LeNet-5's layers, ResNet's 16-channel ones, the first layers of AlexNet
// and VGG-16; 256 at most).
bool wgrad_direct_sums_bias(const Conv2dGeometry& a);

// The heuristic's choice of the direct kernel where it applies: on by default, off when the
// environment sets ECHELON_CONV_WGRAD_DIRECT=0 (an A/B switch for timing; the autotuner lists
// both either way). Process-wide.
void set_conv_wgrad_direct(bool on);
bool conv_wgrad_direct();

}  // namespace echelon::cuda
