// Launchers of cuda/kernels/conv_gemm.cu: convolution as implicit GEMM (no columns buffer), the
// default algorithm of cuda/kernels/conv.h's launchers (ConvAlgorithm::ImplicitGemm). Same
// arguments as there; float only, device pointers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/conv.h>

namespace echelon::cuda {

enum class ConvPass { Forward, BackwardData, BackwardWeight };
const char* name(ConvPass pass);  // "forward", "grad input", "grad weight"

// The implicit GEMM's block tiles (conv_gemm.cu): 16x256, 32x128, 64x64, 128x128 (under TF32
// and bf16 the tensor-core tiles of those shapes).
enum class ConvTile : uint8_t { Tiny, Narrow, Small, Large };

// One pass's kernel configuration: what the heuristic picks (conv_gemm_heuristic, conv.cu's
// conv_heuristic) and what the autotuner (cuda/kernels/conv_tune.h) chooses among. Under the
// current float32 precision; every configuration gives the CPU twin's result within its
// tolerances (the split-K group count changes the order of the sums).
struct ConvConfig {
  bool im2col = false;              // the columns path (conv.cu) instead of the implicit GEMM
  ConvTile tile = ConvTile::Small;  // the implicit GEMM's block tile
  bool warp_core = false;           // fp32 128x128: fma_tile.cuh's warp-tiled core, else the old
  bool table = false;    // gather table (fwd, grad in); grad w: columns; not with the async rings
  int64_t groups = 1;    // split-K groups (normalised: none empty); grad input: not with phases
  bool async_k = false;  // TF32 128x128 forward / grad weight: mma_tile.cuh's async-K tiles
  int stages = 2;        // their ring: 2 or mma_deep_stages() (the other tiles: 2)
  // TF32 128x128, every pass: mma_tile.cuh's gather tiles (the gathered operands by 4-byte
  // cp.async, zero-filled in the padding; the k-contiguous ones as the async-K tiles'; `stages`
  // deep; async_k stays false)
  bool async_gather = false;
  // Grad weight: conv_direct.cu's direct reduction instead of a GEMM tile (conv_direct.h); groups
  // is then its block count, and the other fields are unused.
  bool direct = false;
  // Grad input with stride > 1 and dilation 1: one stride-1 GEMM per phase of the input pixels
  // (conv_phases.h), the fields above applying to each; elsewhere unused.
  bool phases = false;
  // Forward and stride-1 grad input: conv_window.cu's sliding windows over staged rows instead
  // of a GEMM tile (conv_window.h); the other fields are then unused.
  bool window = false;
  bool operator==(const ConvConfig&) const = default;
};
// "im2col", "window", "direct groups=3", "implicit 64x64", "implicit 16x256 table", "implicit
// 128x128 warp groups=8", "implicit 128x128 async-k stages=4", "implicit 128x128 async-gather
// stages=2", ...
std::string to_string(const ConvConfig& config);

// What pass `pass` of `a` runs on the implicit GEMM with tuning off (the process-wide switches
// included: ECHELON_FMA_CORE, ECHELON_MMA_TILE, ECHELON_MMA_ASYNC_K with ECHELON_MMA_STAGES,
// ECHELON_CONV_ASYNC_GATHER, ECHELON_CONV_GATHER_TABLE, the split-K knobs).
ConvConfig conv_gemm_heuristic(ConvPass pass, const Conv2dGeometry& a);
// Every implicit-GEMM configuration of that pass the kernels take under the current precision:
// each tile whose grid fits; both FMA cores on the fp32 128x128 tile (the warp-tiled one in the
// forward only where R % 4 == 0); the gather table on and off where it applies; for the weight
// gradient a ladder of split-K group counts (1, 2, 4, ... up to split_k's bound, and the
// heuristic's count), for a deep forward or grad input (K >= 2048; 64 in the emulation) 1, 2, 4, 8
// and the heuristic's; the TF32 128x128 tile's forward and weight gradient also on the async-K
// tiles at 2 and mma_deep_stages() stages where their k-contiguous operand has runs of 4 (R, or
// OH*OW, a multiple of 4), and in every pass on the gather tiles at 2 and mma_deep_stages()
// stages (ConvConfig::async_gather). Empty when conv_gemm_fits says no.
std::vector<ConvConfig> conv_gemm_candidates(ConvPass pass, const Conv2dGeometry& a);

// Whether the implicit GEMM takes this convolution: its kernels index in 32 bits, so every
// operand (x, w, y) must have fewer than 2^31 elements; larger ones take the columns path.
bool conv_gemm_fits(const Conv2dGeometry& a);

// The gather table of the register-staged tiles and the weight gradient's column table
// (conv_gemm.cu, "the gather table"): on by default, off when the environment sets
// ECHELON_CONV_GATHER_TABLE=0; the same results either way (bit-identical), so this is only an A/B
// switch for timing and tests. Process-wide.
void set_conv_gather_table(bool on);
bool conv_gather_table();

// The TF32 128x128 tile's gather staging (ConvConfig::async_gather: the gathered operands by
// 4-byte cp.async with zero-fill, every operand in the cp.async ring of mma_stages() stages)
// in the heuristic's configurations, instead of the register-staged gathers. An A/B switch (the
// same bits either way); off by default (GPU speed not yet measured); ECHELON_CONV_ASYNC_GATHER=1
// in the environment starts the process with it on. Process-wide; every pass.
void set_conv_async_gather(bool on);
bool conv_async_gather();

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

// The launchers run `config` (an implicit one: config.im2col is conv.cu's business; a warp core
// the forward's weights cannot take, or a table the geometry cannot, falls back as the heuristic
// would). y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be
// null. relu: y = ReLU(that), clamped in the GEMM's store (no pass over y).
void conv2d_forward_implicit(const ConvConfig& config, const Conv2dGeometry& a, const float* x,
                             const float* w, const float* bias, float* y, cudaStream_t stream,
                             bool relu = false);
// Where a grad-input GEMM writes when it computes one phase of a strided convolution
// (conv_phases.h): pixel (i, j) of its geometry's (h, w) image is pixel (row0 + i*row_step,
// col0 + j*col_step) of the full (height, width) image of grad_in.
struct GradInPhase {
  int64_t height = 0, width = 0;
  int64_t row0 = 0, col0 = 0;
  int64_t row_step = 1, col_step = 1;
};
// Overwrites grad_in (N, C, H, W), or with `accumulate` adds the gradient to it (grad_in + value,
// one float add per element: bit for bit the gradient then axpy_(grad_in, it, 1)); with `phase`,
// only that phase's pixels of the full grad_in (N, C, phase->height, phase->width).
void conv2d_backward_input_implicit(const ConvConfig& config, const Conv2dGeometry& a,
                                    const float* grad_out, const float* w, float* grad_in,
                                    cudaStream_t stream, bool accumulate = false,
                                    const GradInPhase* phase = nullptr);
// Overwrites grad_w (O, C, KH, KW).
void conv2d_backward_weight_implicit(const ConvConfig& config, const Conv2dGeometry& a,
                                     const float* grad_out, const float* x, float* grad_w,
                                     cudaStream_t stream);

// out (count) = [out +] sum over g of partial (groups, count), in an order fixed by `groups`
// (groups g = w, w + 8, ... in order, then those 8 sums in order: sum_groups.cu): the deterministic
// second pass of the split-K weight gradients (both GEMM algorithms) and of the direct one. With
// `tail`, the sums of columns [head, count) go to tail (count - head) instead of out: the direct
// weight gradient's partials carry the bias gradient's after the weights'.
void sum_groups(const float* partial, int64_t groups, int64_t count, bool accumulate, float* out,
                cudaStream_t stream, float* tail = nullptr, int64_t head = 0);

// The split-K forward's and grad input's second pass (sum_groups.cu): out (count) = the sum over g
// = 0, 1, ... in order of partial (groups, count), + bias[(i / plane) % channels] when bias is not
// null (out as (N, channels, plane)), then ReLU'd under relu (`r > 0 ? r : 0`), or added to out
// under accumulate (one add of the finished sum). count < 2^31 (conv_gemm_fits).
void sum_split(const float* partial, int64_t groups, int64_t count, const float* bias,
               int64_t channels, int64_t plane, bool relu, bool accumulate, float* out,
               cudaStream_t stream);

}  // namespace echelon::cuda
