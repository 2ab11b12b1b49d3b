// Launchers of cuda/kernels/conv_gemm.cu: convolution as implicit GEMM (no columns buffer), the
// default algorithm of cuda/kernels/conv.h's launchers (ConvAlgorithm::ImplicitGemm). Same
// arguments as there; float only, device pointers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cuda {

// Whether the implicit GEMM takes this convolution: its kernels index in 32 bits, so every
// operand (x, w, y) must have fewer than 2^31 elements; larger ones take the columns path.
bool conv_gemm_fits(const Conv2dGeometry& a);

// The gather table of the 16- and 32-row tiles (conv_gemm.cu, "the gather table"): on by
// default, off when the environment sets ECHELON_CONV_GATHER_TABLE=0; the same results either
// way (bit-identical), so this is only an A/B switch for timing and tests. Process-wide.
void set_conv_gather_table(bool on);
bool conv_gather_table();

// The weight gradient's split-K (conv_gemm.cu, split_k), a tuning knob for GPU sweeps: by
// default as many groups as bring (tiles x groups) blocks to 264 (two per SM of an H200; 4 in
// the emulation build), and more, up to fill_blocks (2048; 4 in the emulation build), while
// each group keeps >= 64 k-slices; each group >= 4 k-slices and <= 64 MiB of partials in all;
// groups > 0 asks for that count instead (within the same bounds). Results depend on the grouping
// (the partials' order of addition), deterministically. Defaults from ECHELON_CONV_WGRAD_FILL and
// ECHELON_CONV_WGRAD_GROUPS; fill_blocks <= 0 restores the default. Process-wide.
void set_conv_wgrad_split(int64_t fill_blocks, int64_t groups);
// The group count conv2d_backward_weight_implicit would use now (for reports).
int64_t conv_wgrad_groups(const Conv2dGeometry& a);

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
// relu: y = ReLU(that), clamped in the GEMM's store (no pass over y).
void conv2d_forward_implicit(const Conv2dGeometry& a, const float* x, const float* w,
                             const float* bias, float* y, cudaStream_t stream, bool relu = false);
// Overwrites grad_in (N, C, H, W).
void conv2d_backward_input_implicit(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                    float* grad_in, cudaStream_t stream);
// Overwrites grad_w (O, C, KH, KW).
void conv2d_backward_weight_implicit(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                     float* grad_w, cudaStream_t stream);

// out (count) = [out +] sum over g of partial (groups, count), added in group order (the
// deterministic second pass of the split-K weight gradients, both algorithms).
void sum_groups(const float* partial, int64_t groups, int64_t count, bool accumulate, float* out,
                cudaStream_t stream);

}  // namespace echelon::cuda
