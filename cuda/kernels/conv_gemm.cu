// Convolution as implicit GEMM: the block tiles of our SGEMM (cuda/kernels/gemm_tile.cuh: FMA;
// mma_tile.cuh: TF32 or bf16 WMMA; a ring of k-slices in shared memory; the weights' rows
// (forward) and grad_out's planes (grad weight) by float4 loads where aligned) with operand
// loaders that gather straight from x and grad_out through the conv geometry, so no columns
// buffer is written or read. With R = C*KH*KW, L = OH*OW and the images folded into the GEMM's N
// or K (one launch for the whole batch, and small images still fill wide tiles):
//   forward      y (O, N*L)        = w (O, R) x cols (R, N*L) + bias   cols(r, (n, q)) gathered
//                                    from x (zero in the padding); bias in the store, and
//                                    with relu the ReLU clamp too (conv2d_relu's forward)
//   grad input   grad_in (C, N*H*W) [+]= w' (C, O*KH*KW) x g' (O*KH*KW, N*H*W)
//                the gather formulation of col2im: input pixel (h, w) of image n receives tap
//                (o, ki, kj) from grad_out (n, o, oh, ow) where oh*sh - ph + ki*dh = h (same for
//                w), zero where no such output position exists. Each output element is owned by
//                one thread (no atomics, deterministic); with stride s, about 1 - 1/s^2 of the
//                gathered taps are zeros, the price of not having a scatter. Accumulating
//                (ConvCall::accumulate: autograd's gradient sum), the store adds its finished
//                value to grad_in (StoreMode::Add): bit for bit the old axpy after the GEMM.
//   grad weight  grad_w (O, R)     = grad_out (O, N*L) x cols^T (N*L, R): split-K over N*L,
//                block z sums k-slices [z * per_group, (z + 1) * per_group) in registers, then
//                the groups' partials are added in group order by sum_groups (deterministic)
// The forward and the unphased grad input split K too where their tiles leave the GPU half idle
// and K is deep (output_split_k: VGG-16's 512-channel layers): group z writes its partial output
// at out + z*M*N, and sum_split adds the groups in order with the bias, the ReLU or the gradient
// sum.
// Tile shapes by problem size: M (the output channels, or the input channels for grad input) up to
// 16 gets the 16x256 TinyTile, up to 32 the 32x128 NarrowTile (their forward and grad input gather
// through a per-block table of decoded k, and so do the other register-staged tiles': "the gather
// table" in conv_operands.cuh, with the gathers and the operand loader); the 128x128 tile when the
// problem still fills the GPU with it (FMA: the warp-tiled core of fma_tile.cuh, as the SGEMM's,
// where warp_tiles_fit, else gemm_tile.cuh's LargeTile; TF32 and bf16: mma_tile.cuh's, k-slices of
// 16, also for the weight gradient whose split-K fills the GPU, and so does the FMA weight
// gradient's wherever M and N fill it; ECHELON_MMA_TILE=64 / 128 force a tensor-core tile; TF32:
// the 2-stage ring with the weights (forward) / grad_out (grad weight) by float4 registers, or
// mma_tile.cuh's async-K tiles, those k-contiguous operands by cp.async into [m][k] rows, with 2 or
// 4 stages: ConvConfig::async_k / stages, the heuristic's from ECHELON_MMA_ASYNC_K=1 and
// ECHELON_MMA_STAGES, default off; the other operand is a gather, in registers one slice ahead
// whatever the ring; grad input's weights are not k-contiguous in memory, so it gains nothing; or,
// every pass, mma_tile.cuh's gather tiles, whose gathers go by 4-byte cp.async with zero-fill too,
// 2 or 4 stages: ConvConfig::async_gather, the heuristic's from ECHELON_CONV_ASYNC_GATHER=1 /
// set_conv_async_gather with ECHELON_MMA_STAGES, default off); else 64x64. These choices (tile, FMA
// core, gather table, split-K groups, async-K, gather staging and stages) are one ConvConfig
// (conv_gemm.h): conv_gemm_heuristic makes them as above, conv_gemm_candidates lists every legal
// one for the autotuner (conv_tune.cu), and the launchers run the config they are given.
// Index math is 32-bit (ConvIndex, built on the host with its FastDiv divisors: no division
// instruction in the gathers); conv.cu sends larger
// convolutions (conv_gemm_fits) and the input gradient of < 8 input channels to im2col + GEMM.
// CPU twin: the naive convolution in tensor/cpu/conv.cpp (forward, grad input, grad weight).
// tests/gpu/conv_gpu_test.cpp compares these kernels with ops::conv2d on the CPU, whose fast path
// is itself parity-tested against that twin (tests/cpu).
#include <echelon/cuda/kernels/conv_gemm.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <echelon/base/error.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/switches.h>
#include <echelon/cuda/kernels/channels.cuh>

#include "conv_operands.cuh"
#include "fma_tile.cuh"
#include "gemm_tile.cuh"
#include "mma_tile.cuh"

namespace echelon::cuda {
namespace {

using namespace tile;
using namespace conv_gemm_detail;

// ---- kernels -----------------------------------------------------------------------------------

// Resident blocks per SM an instantiation asks ptxas to fit (__launch_bounds__'s minimum, which
// caps registers at 65536 / (256 * it), rounded down to 8): raised only where
// tools/cuda-resources.py showed the cap costs no spill, each from 2 or 3 blocks to one more (or
// from 1 to 2). 0 leaves registers to ptxas; 1 is not the same: it lets ptxas take up to 255.
// A hypothesis for the GPU to confirm (more resident blocks hide latency, but the cp.async ring
// already does): bench/RESULTS.md, section gpu8. The gather table (conv23) freed the registers
// for two more: the tiny TF32 forward (106 -> 80) and the narrow fp32 grad input (75 -> 64).
template <typename T, ConvPass P, bool kMma>
constexpr int conv_min_blocks() {
  constexpr bool fwd = P == ConvPass::Forward, data = P == ConvPass::BackwardData;
  constexpr bool weight = P == ConvPass::BackwardWeight;
  if constexpr (std::is_same_v<T, LargeTile>)
    return weight ? 2 : 0;  // 155 -> 128 registers
  else if constexpr (std::is_same_v<T, LargeWarpTile>)
    // 128, no spill (forward: vector weights only). Grad input: 127 uncapped, so 2 blocks anyway
    // (under the cap it no longer spills the 104 B it did when written: session 35).
    return data ? 0 : 2;
  else if constexpr (std::is_same_v<T, SmallTile>)
    // 79-80 -> 64; the TF32 weight gradient too (its B pairs by LDS.64 spilled at 48, session 42)
    return data || (kMma && weight) ? 4 : 0;
  else if constexpr (std::is_same_v<T, NarrowTile>)
    return data || (kMma && weight) ? 4 : 0;  // 75-92 -> 64
  else if constexpr (std::is_same_v<T, TinyTile>)
    return weight || fwd ? 3 : 0;  // 80-128 -> 80
  else if constexpr (std::is_same_v<T, Bf16SmallTile>)
    // Grad input 112 -> 80; the forward 68 -> 64, 4 blocks as before session 43's epilogue
    // (ConvOperands::store: each column's index math shared by its stores) took 4 more.
    return data ? 3 : fwd ? 4 : 0;
  else if constexpr (std::is_same_v<T, Bf16NarrowTile>)
    return weight ? 3 : 0;  // 104 -> 80
  else if constexpr (std::is_same_v<T, Bf16TinyTile>)
    return data ? 2 : 0;  // 176 -> 128
  else if constexpr (async_gather<T>())
    return weight ? 1 : 0;  // left to ptxas, the 4-stage one took 128 registers and spilled
  else if constexpr (std::is_same_v<T, Tf32LargeTile>)
    // 1 from session 28 (8 bytes of spill at 128 registers); since session 41's one staging
    // address a thread (gemm_tile.cuh, Part::stage) the weight gradient takes 136 uncapped and
    // 122 at 2 blocks, no spill; forward and grad input are at 120-125 uncapped.
    return weight ? 2 : 0;
  else
    return 0;
}

// Block (x, y, z): the C tile at m0 = y * kM, n0 = x * kN over k-slices [z * per_group,
// (z + 1) * per_group) (one group, z = 0, except in the split-K weight gradient).
template <typename T, ConvPass P, bool kMma>
__global__ void __launch_bounds__(kThreads, (conv_min_blocks<T, P, kMma>()))
    conv_gemm_kernel(ConvIndex index, const float* __restrict__ a_src,
                     const float* __restrict__ b_src, const float* __restrict__ bias,
                     float* __restrict__ out, int64_t per_group, StoreMode mode, bool use_table) {
  ConvOperands<P, has_table<T, P>()> ops{index, a_src, b_src, mode};
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kN;
  const int64_t k_slices = (ops.g.K + T::kK - 1) / T::kK;
  const int64_t first = static_cast<int64_t>(blockIdx.z) * per_group;
  const int64_t slices = max(int64_t{0}, min(k_slices, first + per_group) - first);
  (void)use_table;  // the async-K and gather tiles have no table
  if constexpr (has_columns<T, P>()) {
    __shared__ ColumnEntry columns[T::kN];
    if (use_table) {
      fill_columns(ops.g, columns, n0, T::kN);
      ops.columns = columns;
      ops.col0 = n0;
      __syncthreads();  // the columns are decoded before the first slice's gathers
    }
  }
  if constexpr (has_table<T, P>()) {
    static_assert(!kDynamicRing<T>, "the table is the dynamic shared memory of ring-less tiles");
    // The launcher decides (table_legal); use_table is the same for every block, and the launch's
    // dynamic shared memory holds the table (table_bytes).
    if (use_table) {
      ECH_DYNAMIC_SHARED_ALIGNED(TableEntry, table, 8);
      static_assert(kThreads % T::kN == 0, "a thread's op(B) column must be fixed (Part::fetch)");
      fill_table<P>(ops.g, table, static_cast<int>(k_slices) * T::kK);
      ops.table = table;
      ops.col = n0 + static_cast<int>(threadIdx.x) % T::kN;
      int col_base;
      decode_column<P>(ops.g, static_cast<int>(min(ops.col, int64_t{INT_MAX})), col_base,
                       ops.col_mask);
      ops.col_ptr = ops.b_src + col_base;  // read only at offsets its mask lets in
      __syncthreads();                     // the table is filled before the first slice's gathers
    }
  }
  const auto locate = [&](int64_t s, auto&& f) { f(ops, (first + s) * T::kK); };
  Staging st = staging_of<T>(ops);
  if constexpr (T::kWarpTiled && P == ConvPass::Forward) {
    // The launcher's promise (warp_tiles_fit): one staging loop instead of two (Scalar weights
    // too) keeps the kernel at 128 registers without spill.
#if ECHELON_CUDA_SIM
    if (st.a != Load::Vector) __trap();
#endif
    st.a = Load::Vector;
  }
  const auto store = [&](int64_t m, int64_t n, float v) { ops.store(out, bias, m, n, v); };
  if constexpr (kDynamicRing<T>) {  // mma_tile.cuh's async-K tiles, in dynamic shared memory
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // TF32 and bf16 tensor cores need sm_80 or newer
#else
    ECH_DYNAMIC_SHARED_ALIGNED(MmaShared<T>, smem, 128);  // the launch's mma_dynamic_shared<T>()
    MmaWarps<T> warps;
    for_each_slice<T>(slices, st, m0, n0, smem->a, smem->b, locate, [&](int cur, const Staging& c) {
      warps.multiply(smem->a[cur], smem->b[cur], c);  // AsyncK stages: [d][k]
    });
    warps.store_tile(smem->scratch[threadIdx.x / 32], m0, n0, store);
#endif
  } else {
    // 32-byte aligned rows of (kM + kPad) * sizeof(Elem) bytes: every WMMA fragment pointer is
    // 32-byte aligned.
    __shared__ __align__(32) ATiles<T> a_tile;  // [k][m] = A(m0+m, k0+k)
    __shared__ __align__(32) BTiles<T> b_tile;  // [k][n] = B(k0+k, n0+n)
    if constexpr (kMma) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
      __trap();  // TF32 and bf16 tensor cores need sm_80 or newer
#else
      __shared__ __align__(32) float scratch[kWarps][kFrag * kFrag];  // one accumulator, row-major
      MmaWarps<T> warps;
      for_each_slice<T>(slices, st, m0, n0, a_tile, b_tile, locate, [&](int cur, const Staging& c) {
        warps.multiply(a_tile[cur], b_tile[cur], c);  // c: what to round
      });
      warps.store_tile(scratch[threadIdx.x / 32], m0, n0, store);
#endif
    } else if constexpr (T::kWarpTiled) {
      FmaWarps<T> warps;
      for_each_slice<T>(slices, st, m0, n0, a_tile, b_tile, locate,
                        [&](int cur) { warps.multiply(a_tile[cur], b_tile[cur]); });
      warps.store_tile(m0, n0, store);
    } else {
      const int thread_col = threadIdx.x % T::kCols, thread_row = threadIdx.x / T::kCols;
      float acc[T::kThM][T::kThN] = {};
      for_each_slice<T>(slices, st, m0, n0, a_tile, b_tile, locate, [&](int cur) {
        multiply_slice<T>(a_tile[cur], b_tile[cur], thread_row, thread_col, acc);
      });
      store_fma_tile<T>(acc, m0, n0, thread_row, thread_col, store);
    }
  }
}

// ---- launchers ---------------------------------------------------------------------------------

constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;
constexpr int64_t kMinSlicesPerGroup = 4;  // a split-K group's work must outweigh its partial
constexpr size_t kPartialBudget = size_t{64} << 20;
// The weight gradient's fill target, and the k-slices a group keeps at least when the heuristic
// goes past kFillBlocks towards it. Measured on the H200 in session 23 (bench/RESULTS.md, "the
// weight-gradient split-K sweep"): VGG-16's and AlexNet's deep layers ran 1.2-1.5x faster at
// 1,000-2,300 blocks than at kFillBlocks' 264, while thinner groups (32 slices) made ResNet-20's
// 64-channel layer 15% and the one-tile layers 4% slower: at 64 slices those keep their old split.
// The emulation keeps kFillBlocks, so test-sized problems split as before.
#if ECHELON_CUDA_SIM
constexpr int64_t kWgradFillBlocks = kFillBlocks, kWgradDeepSlices = 1;
#else
constexpr int64_t kWgradFillBlocks = 2048, kWgradDeepSlices = 64;
#endif
// The K from which the forward and grad input may split (output_split_k): VGG-16's 256- and
// 512-channel layers (K = 2304, 4608) and not ResNet-20's (576); small in the emulation, so that
// test-sized problems split.
#if ECHELON_CUDA_SIM
constexpr int64_t kOutputSplitMinK = 64;
#else
constexpr int64_t kOutputSplitMinK = 2048;
#endif

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The tile's block shape (the bf16 and TF32 tiles have the fp32 ones' shapes).
std::pair<int64_t, int64_t> tile_shape(ConvTile tile) {
  static_assert(LargeTile::kM == Tf32LargeTile::kM && LargeTile::kN == Tf32LargeTile::kN);
  static_assert(TinyTile::kM == Bf16TinyTile::kM && NarrowTile::kN == Bf16NarrowTile::kN);
  switch (tile) {
    case ConvTile::Tiny:
      return {TinyTile::kM, TinyTile::kN};
    case ConvTile::Narrow:
      return {NarrowTile::kM, NarrowTile::kN};
    case ConvTile::Small:
      return {SmallTile::kM, SmallTile::kN};
    default:
      return {LargeTile::kM, LargeTile::kN};
  }
}

int64_t tiles_of(ConvTile tile, const GemmShape& s) {
  const auto [m, n] = tile_shape(tile);
  return ceil_div(s.M, m) * ceil_div(s.N, n);
}

// Tiny / Narrow for few rows (a 16 x 256 block costs what a 32 x 128 one does, so up to 16 rows
// Tiny needs half the blocks); Large when its tiles still give every SM work (FMA: LargeTile,
// kFillBlocks tiles; TF32 and bf16: mma_tile.cuh's 128x128 tile as mma_large_tile_for decides),
// or, in the weight gradient, whenever M and N fill it, the split-K supplying the blocks; else
// Small. Why the FMA weight gradient takes the 128x128 tile (session 38, from the sm_90 SASS, not
// yet timed): a 64x64 k-slice gathers 2 elements of cols^T per thread for 128 FFMA, in a loop of
// 381 instructions (tools/sass-loops.py, both staging paths counted); the warp-tiled 128x128
// one gathers 4 for 512 FFMA, in 857.
ConvTile pick_tile(const GemmShape& s, Precision precision, bool split_k) {
  if (s.M <= TinyTile::kM) return ConvTile::Tiny;
  if (s.M <= NarrowTile::kM) return ConvTile::Narrow;
  if (precision != Precision::Fp32)
    return mma_large_tile_for(s.M, s.N, split_k ? kFillBlocks : tiles_of(ConvTile::Large, s))
               ? ConvTile::Large
               : ConvTile::Small;
  const bool fills = split_k || tiles_of(ConvTile::Large, s) >= kFillBlocks;
  return s.M >= LargeTile::kM && s.N >= LargeTile::kN && fills ? ConvTile::Large : ConvTile::Small;
}

// k-slice depth of a tile under a precision (the unit of the split-K groups).
int64_t slice_depth(ConvTile tile, Precision precision) {
  const bool large = tile == ConvTile::Large;
  switch (precision) {
    case Precision::Tf32:
      return large ? Tf32LargeTile::kK : SmallTile::kK;
    case Precision::Bf16:
      return large ? Bf16ConvLargeTile::kK : Bf16SmallTile::kK;
    default:
      return SmallTile::kK;  // every fp32 tile's
  }
}

std::atomic<bool>& gather_table_flag() {
  static std::atomic<bool> flag = switches::conv_gather_table();
  return flag;
}

std::atomic<bool>& async_gather_flag() {
  static std::atomic<bool> flag = switches::conv_async_gather();
  return flag;
}

// The warp-tiled FMA core's forward stages the weights by float4 loads only
// (ConvOperands::a_vector: 16-byte aligned rows of R, a multiple of 4; VGG-16's 64-512 channel
// layers); elsewhere the block-strided core runs.
bool warp_core_fits(ConvPass pass, const GemmShape& s, const float* a_src) {
  const bool aligned =
      a_src == nullptr || reinterpret_cast<uintptr_t>(a_src) % (kVec * sizeof(float)) == 0;
  return pass != ConvPass::Forward || (aligned && s.K % kVec == 0);
}

template <typename T, ConvPass P, bool kMma>
void launch_on(const char* op, const Conv2dGeometry& g, const GemmShape& s, bool table,
               const float* a_src, const float* b_src, const float* bias, float* out,
               int64_t groups, int64_t per_group, StoreMode mode, cudaStream_t stream,
               const GradInPhase* phase) {
  const int64_t tiles_m = ceil_div(s.M, T::kM), tiles_n = ceil_div(s.N, T::kN);
  ECH_CHECK(tiles_m <= kMaxGridY && tiles_n <= INT_MAX && groups <= kMaxGridZ, op,
            ": convolution too large for the implicit-GEMM grid (M=", s.M, ", N=", s.N,
            ", split groups=", groups, ")");
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                  static_cast<unsigned>(groups));
  [[maybe_unused]] const char* name = !kMma ? "conv_gemm_kernel"
                                      : std::is_same_v<typename T::Elem, float>
                                          ? "conv_gemm_kernel (tf32)"
                                          : "conv_gemm_kernel (bf16)";
  const bool use_table =
      (has_table<T, P>() || has_columns<T, P>()) && table && table_legal(P, g, s);
  constexpr size_t ring_shared = mma_dynamic_shared<T>();
  // A kernel's opt-in is set once (launch.h): always the largest table, whatever this K.
  if constexpr (has_table<T, P>())
    opt_in_dynamic_shared<conv_gemm_kernel<T, P, kMma>>(kTableK * sizeof(TableEntry));
  if constexpr (ring_shared > 0) opt_in_dynamic_shared<conv_gemm_kernel<T, P, kMma>>(ring_shared);
  const size_t dynamic_shared =
      has_table<T, P>() && use_table ? table_bytes(s.K, T::kK) : ring_shared;
  ECH_LAUNCH_NAMED(name, grid, kThreads, dynamic_shared, stream, conv_gemm_kernel<T, P, kMma>)
  (ConvIndex(g, s, phase), a_src, b_src, bias, out, per_group, mode, use_table);
  ECH_CUDA_CHECK_LAUNCH(op);
}

// One launch of pass P with the configuration's tile under the current precision.
template <ConvPass P>
void launch_conv_gemm(const char* op, const ConvConfig& c, const Conv2dGeometry& g,
                      const float* a_src, const float* b_src, const float* bias, float* out,
                      int64_t groups, int64_t per_group, StoreMode mode, cudaStream_t stream,
                      const GradInPhase* phase = nullptr) {
  const GemmShape s = gemm_shape(P, g);
  const Precision precision = float32_precision();
  const auto on = [&](auto tile, auto mma) {
    launch_on<decltype(tile), P, decltype(mma)::value>(op, g, s, c.table, a_src, b_src, bias, out,
                                                       groups, per_group, mode, stream, phase);
  };
  using Fma = std::false_type;
  using Mma = std::true_type;
  if (precision == Precision::Bf16) {
    switch (c.tile) {
      case ConvTile::Tiny:
        return on(Bf16TinyTile{}, Mma{});
      case ConvTile::Narrow:
        return on(Bf16NarrowTile{}, Mma{});
      case ConvTile::Small:
        return on(Bf16SmallTile{}, Mma{});
      case ConvTile::Large:
        return on(Bf16ConvLargeTile{}, Mma{});
    }
  }
  const bool tf32 = precision == Precision::Tf32;
  switch (c.tile) {
    case ConvTile::Tiny:
      return tf32 ? on(TinyTile{}, Mma{}) : on(TinyTile{}, Fma{});
    case ConvTile::Narrow:
      return tf32 ? on(NarrowTile{}, Mma{}) : on(NarrowTile{}, Fma{});
    case ConvTile::Small:
      return tf32 ? on(SmallTile{}, Mma{}) : on(SmallTile{}, Fma{});
    case ConvTile::Large:
      if (tf32 && c.async_gather)
        return c.stages == kDeepStages ? on(Tf32DeepGatherTile{}, Mma{})
                                       : on(Tf32GatherTile{}, Mma{});
      if constexpr (P != ConvPass::BackwardData)  // async_k_applies: never grad input
        if (tf32 && c.async_k)
          return c.stages == kDeepStages ? on(Tf32DeepAsyncKTile{}, Mma{})
                                         : on(Tf32AsyncKTile{}, Mma{});
      if (tf32) return on(Tf32LargeTile{}, Mma{});
      return c.warp_core && warp_core_fits(P, s, a_src) ? on(LargeWarpTile{}, Fma{})
                                                        : on(LargeTile{}, Fma{});
  }
}

// The weight gradient's split-K knobs (conv_gemm.h, set_conv_wgrad_split): the blocks the
// heuristic aims for (0: the default), and a fixed group count (0: the heuristic).
std::atomic<int64_t>& wgrad_fill_blocks() {
  static std::atomic<int64_t> blocks = [] {
    const int64_t b = switches::conv_wgrad_fill();
    return b > 0 ? b : kWgradFillBlocks;
  }();
  return blocks;
}
std::atomic<int64_t>& wgrad_groups() {
  static std::atomic<int64_t> groups{switches::conv_wgrad_groups()};
  return groups;
}

// A pass's k-slices on a tile, and the most split-K groups it may take: at least
// kMinSlicesPerGroup k-slices a group and at most kPartialBudget bytes of partials.
int64_t k_slices_of(const GemmShape& s, ConvTile tile) {
  return ceil_div(s.K, slice_depth(tile, float32_precision()));
}
int64_t most_groups(const GemmShape& s, ConvTile tile) {
  const int64_t by_budget =
      std::max<int64_t>(static_cast<int64_t>(kPartialBudget / sizeof(float)) / (s.M * s.N), 1);
  return std::max<int64_t>(
      std::min({ceil_div(k_slices_of(s, tile), kMinSlicesPerGroup), by_budget, kMaxGridZ}), 1);
}

// `wanted` groups within the bounds, none empty: (groups, k-slices per group).
std::pair<int64_t, int64_t> normalise_groups(const GemmShape& s, ConvTile tile, int64_t wanted) {
  const int64_t k_slices = k_slices_of(s, tile);
  const int64_t groups = std::clamp<int64_t>(wanted, 1, most_groups(s, tile));
  const int64_t per_group = std::max<int64_t>(ceil_div(k_slices, groups), 1);
  return {std::max<int64_t>(ceil_div(k_slices, per_group), 1), per_group};
}

// The heuristic's split-K groups of the weight gradient on `tile`: enough (tiles x groups) blocks
// to reach kFillBlocks, and more towards the fill target while each group keeps
// kWgradDeepSlices k-slices; or the fixed count; within normalise_groups' bounds.
int64_t split_k(const GemmShape& s, ConvTile tile) {
  const int64_t fixed = wgrad_groups().load(std::memory_order_relaxed);
  const int64_t tiles = tiles_of(tile, s);
  const int64_t deep =
      std::min(ceil_div(wgrad_fill_blocks().load(std::memory_order_relaxed), tiles),
               ceil_div(k_slices_of(s, tile), kWgradDeepSlices));
  const int64_t wanted = fixed > 0 ? fixed : std::max(ceil_div(kFillBlocks, tiles), deep);
  return normalise_groups(s, tile, wanted).first;
}

// Whether the forward or grad input of `s` is deep enough for split-K to pay: its partials cost
// groups x 8 bytes an output element (written, then read by sum_split), against 2 K flops.
bool output_split_pays(const GemmShape& s) {
  return s.K >= kOutputSplitMinK;
}

// The heuristic's split-K groups of the forward and the grad input on `tile`: none while the
// tiles give every SM of the H200 a block (more than kFillBlocks / 2 tiles) or K is shallow;
// else enough groups to reach kFillBlocks blocks, within normalise_groups' bounds. VGG-16's
// 512-channel 2x2 layers have 64 tiles of 64x64 at batch 128, over K = 4608. Not yet timed on a
// GPU.
int64_t output_split_k(const GemmShape& s, ConvTile tile) {
  const int64_t tiles = tiles_of(tile, s);
  if (2 * tiles > kFillBlocks || !output_split_pays(s)) return 1;
  return normalise_groups(s, tile, ceil_div(kFillBlocks, tiles)).first;
}

// Whether the async-K tiles would stage pass's k-contiguous operand by cp.async (ConvOperands::
// a_vector, an aligned pointer assumed): the forward's weights (rows of R, a multiple of 4) and
// the weight gradient's grad_out (planes of L, a multiple of 4); never grad input's weights.
bool async_k_applies(ConvPass pass, const Conv2dGeometry& a, const GemmShape& s) {
  if (pass == ConvPass::Forward) return s.K % kVec == 0;
  return pass == ConvPass::BackwardWeight && a.out_h * a.out_w % kVec == 0;
}

bool grid_fits(ConvTile tile, const GemmShape& s) {
  const auto [m, n] = tile_shape(tile);
  return ceil_div(s.M, m) <= kMaxGridY && ceil_div(s.N, n) <= INT_MAX;
}

}  // namespace

const char* name(ConvPass pass) {
  switch (pass) {
    case ConvPass::Forward:
      return "forward";
    case ConvPass::BackwardData:
      return "grad input";
    default:
      return "grad weight";
  }
}

std::string to_string(const ConvConfig& c) {
  if (c.im2col) return "im2col";
  if (c.window) return "window";
  if (c.direct) return c.groups > 1 ? "direct groups=" + std::to_string(c.groups) : "direct";
  const auto [m, n] = tile_shape(c.tile);
  std::string out = "implicit " + std::to_string(m) + "x" + std::to_string(n);
  if (c.tile == ConvTile::Large && float32_precision() == Precision::Fp32)
    out += c.warp_core ? " warp" : " strided";
  if (c.table) out += " table";
  if (c.async_k) out += " async-k stages=" + std::to_string(c.stages);
  if (c.async_gather) out += " async-gather stages=" + std::to_string(c.stages);
  if (c.groups > 1) out += " groups=" + std::to_string(c.groups);
  if (c.phases) out += " phases";
  return out;
}

ConvConfig conv_gemm_heuristic(ConvPass pass, const Conv2dGeometry& a) {
  const GemmShape s = gemm_shape(pass, a);
  ConvConfig c;
  c.tile = pick_tile(s, float32_precision(), pass == ConvPass::BackwardWeight);
  c.warp_core =
      c.tile == ConvTile::Large && float32_precision() == Precision::Fp32 && fma_warp_tiles();
  c.table = gather_table_flag().load(std::memory_order_relaxed) && table_legal(pass, a, s);
  if (s.M * s.N > 0)
    c.groups = pass == ConvPass::BackwardWeight ? split_k(s, c.tile) : output_split_k(s, c.tile);
  const bool tf32_large = c.tile == ConvTile::Large && float32_precision() == Precision::Tf32;
  if (tf32_large && async_gather_flag().load(std::memory_order_relaxed))
    c.async_gather = true, c.stages = mma_stages();  // gathers by b_at
  else if (tf32_large && mma_async_k() && async_k_applies(pass, a, s))
    c.async_k = true, c.stages = mma_stages();
  c.table = c.table && config_has_table(c);
  return c;
}

std::vector<ConvConfig> conv_gemm_candidates(ConvPass pass, const Conv2dGeometry& a) {
  std::vector<ConvConfig> out;
  const GemmShape s = gemm_shape(pass, a);
  if (!conv_gemm_fits(a) || s.M * s.N == 0) return out;
  const ConvConfig heuristic = conv_gemm_heuristic(pass, a);
  const bool fp32 = float32_precision() == Precision::Fp32;
  for (const ConvTile tile : {ConvTile::Tiny, ConvTile::Narrow, ConvTile::Small, ConvTile::Large}) {
    if (!grid_fits(tile, s)) continue;
    std::vector<bool> cores{false}, tables{false};
    if (tile == ConvTile::Large && fp32 && warp_core_fits(pass, s, nullptr)) cores.push_back(true);
    if (table_legal(pass, a, s)) tables.push_back(true);
    // The grad weight's column table gives the same bits in fewer instructions: its ladder is
    // timed once, with the table as the switch has it (ECHELON_CONV_GATHER_TABLE=0 for the A/B).
    if (pass == ConvPass::BackwardWeight)
      tables = {gather_table_flag().load(std::memory_order_relaxed)};
    struct Ring {
      bool async_k, async_gather;
      int stages;
    };
    std::vector<Ring> rings{{false, false, 2}};
    const bool tf32_large = tile == ConvTile::Large && float32_precision() == Precision::Tf32;
    if (tf32_large && async_k_applies(pass, a, s))
      rings.insert(rings.end(), {{true, false, 2}, {true, false, kDeepStages}});
    if (tf32_large) rings.insert(rings.end(), {{false, true, 2}, {false, true, kDeepStages}});
    // Split-K: the weight gradient's ladder up to its bound; the forward's and grad input's, when
    // deep, up to 8 groups (their partials are the size of the output).
    std::vector<int64_t> groups{1};
    if (pass == ConvPass::BackwardWeight || output_split_pays(s)) {
      const int64_t most = pass == ConvPass::BackwardWeight ? most_groups(s, tile) : 8;
      for (int64_t g = 2; g < most; g *= 2) groups.push_back(g);
      groups.push_back(most);
      if (tile == heuristic.tile) groups.push_back(heuristic.groups);
      for (int64_t& g : groups) g = normalise_groups(s, tile, g).first;
      std::sort(groups.begin(), groups.end());
      groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    }
    for (const bool core : cores)
      for (const bool table : tables)
        for (const int64_t g : groups)
          for (const Ring& r : rings) {
            ConvConfig c{false, tile, core, table, g, r.async_k, r.stages, r.async_gather};
            c.table = c.table && config_has_table(c);  // the async rings: once, without
            if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
          }
  }
  return out;
}

void set_conv_gather_table(bool on) {
  gather_table_flag().store(on, std::memory_order_relaxed);
}

bool conv_gather_table() {
  return gather_table_flag().load(std::memory_order_relaxed);
}

void set_conv_async_gather(bool on) {
  async_gather_flag().store(on, std::memory_order_relaxed);
}

bool conv_async_gather() {
  return async_gather_flag().load(std::memory_order_relaxed);
}

bool conv_gemm_fits(const Conv2dGeometry& a) {
  const int64_t most = std::max(
      {a.n * a.c * a.h * a.w, a.n * a.o * a.out_h * a.out_w, a.o * a.c * a.kernel_h * a.kernel_w});
  return most <= INT_MAX;
}

void conv2d_forward_implicit(const ConvConfig& config, const Conv2dGeometry& a, const float* x,
                             const float* w, const float* bias, float* y, cudaStream_t stream,
                             bool relu) {
  const GemmShape s = gemm_shape(ConvPass::Forward, a);
  if (s.M * s.N == 0) return;
  const char* op = "conv2d_forward (implicit GEMM)";
  const auto [groups, per_group] = normalise_groups(s, config.tile, config.groups);
  if (groups == 1) {
    launch_conv_gemm<ConvPass::Forward>(op, config, a, w, x, bias, y, 1, per_group,
                                        relu ? StoreMode::Relu : StoreMode::Write, stream);
    return;
  }
  // Split-K: the groups' partial outputs (groups, N, O, OH, OW), then their sum with the bias and
  // the clamp.
  Scratch partial(static_cast<size_t>(groups * s.M * s.N) * sizeof(float), stream);
  launch_conv_gemm<ConvPass::Forward>(op, config, a, w, x, nullptr, partial.as<float>(), groups,
                                      per_group, StoreMode::Write, stream);
  sum_split(partial.as<const float>(), groups, s.M * s.N, bias, a.o, a.out_h * a.out_w, relu, false,
            y, stream);
}

void conv2d_backward_input_implicit(const ConvConfig& config, const Conv2dGeometry& a,
                                    const float* grad_out, const float* w, float* grad_in,
                                    cudaStream_t stream, bool accumulate,
                                    const GradInPhase* phase) {
  const GemmShape s = gemm_shape(ConvPass::BackwardData, a);
  if (s.M * s.N == 0) return;
  const char* op = "conv2d_backward_input (implicit GEMM)";
  const auto [groups, per_group] = normalise_groups(s, config.tile, config.groups);
  ECH_CHECK(groups == 1 || phase == nullptr, op,
            ": a phase of a strided input gradient does not split K (groups=", groups, ")");
  if (groups == 1) {
    launch_conv_gemm<ConvPass::BackwardData>(
        op, config, a, w, grad_out, nullptr, grad_in, 1, per_group,
        accumulate ? StoreMode::Add : StoreMode::Write, stream, phase);
    return;
  }
  // Split-K: the groups' partial gradients (groups, N, C, H, W), then their sum (+ grad_in).
  Scratch partial(static_cast<size_t>(groups * s.M * s.N) * sizeof(float), stream);
  launch_conv_gemm<ConvPass::BackwardData>(op, config, a, w, grad_out, nullptr, partial.as<float>(),
                                           groups, per_group, StoreMode::Write, stream);
  sum_split(partial.as<const float>(), groups, s.M * s.N, nullptr, a.c, a.h * a.w, false,
            accumulate, grad_in, stream);
}

void set_conv_wgrad_split(int64_t fill_blocks, int64_t groups) {
  wgrad_fill_blocks().store(fill_blocks > 0 ? fill_blocks : kWgradFillBlocks);
  wgrad_groups().store(std::max<int64_t>(groups, 0));
}

int64_t conv_wgrad_groups(const Conv2dGeometry& a) {
  return conv_gemm_heuristic(ConvPass::BackwardWeight, a).groups;
}

void conv2d_backward_weight_implicit(const ConvConfig& config, const Conv2dGeometry& a,
                                     const float* grad_out, const float* x, float* grad_w,
                                     cudaStream_t stream) {
  const GemmShape s = gemm_shape(ConvPass::BackwardWeight, a);
  if (s.M * s.N == 0) return;
  const auto [groups, per_group] = normalise_groups(s, config.tile, config.groups);
  const char* op = "conv2d_backward_weight (implicit GEMM)";
  if (groups == 1) {  // K = 0 too: the kernel then writes zeros
    launch_conv_gemm<ConvPass::BackwardWeight>(op, config, a, grad_out, x, nullptr, grad_w, 1,
                                               per_group, StoreMode::Write, stream);
    return;
  }
  Scratch partial(static_cast<size_t>(groups * s.M * s.N) * sizeof(float), stream);  // (groups,
                                                                                     // O, R)
  launch_conv_gemm<ConvPass::BackwardWeight>(op, config, a, grad_out, x, nullptr,
                                             partial.as<float>(), groups, per_group,
                                             StoreMode::Write, stream);
  sum_groups(partial.as<const float>(), groups, s.M * s.N, false, grad_w, stream);
}

}  // namespace echelon::cuda
