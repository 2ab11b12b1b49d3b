// The tensor-core side of our GEMM block tiles (the dense SGEMM in cuda/kernels/matmul.cu, the
// implicit-GEMM convolution in cuda/kernels/conv_gemm.cu): the staging of gemm_tile.cuh (the
// operand loaders, the ring of k-slices in shared memory, cp.async) with tensor-core fragments in
// place of the FMA threads' register tiles. The tile's element type picks the precision:
//   float: TF32, PTX mma.sync m16n8k8 on fragments read from shared memory by plain loads
//          (mma_m16n8k8_tf32; WMMA's 16x16x8 until session 41: each 16x16 piece is two m16n8k8
//          products), rounded to TF32 after the load (round to nearest, ties away,
//          as the CPU twin cpu::gemm_tf32 does; the tensor cores would otherwise truncate); in the
//          128x128 tile the register-staged operands are rounded once when staged instead
//          (gemm_tile.cuh, tf32_when_staged), their fragments not again;
//   __nv_bfloat16: bf16, WMMA 16x16x16 fragments; the shared tiles hold bf16, rounded to
//          nearest even when staged (__float2bfloat16_rn, as cpu::gemm_bf16 does), which also
//          halves their footprint. Global memory, accumulators and outputs stay fp32.
// Two families of block tiles:
//   the gemm_tile.cuh shapes (64x64, 32x128, 16x256; k-slices of one MMA's k: 8 TF32, 16 bf16):
//          the 8 warps each own a 16 x 32 piece of C (kM / 16 warps along m), so one A fragment
//          and two B fragments are loaded from shared per two MMAs, and a barrier every 8 (16) k;
//   MmaLargeTile, 128x128 (the brief of issue #10: the small tiles starve the tensor cores on
//          shared loads and barriers): the warps tile C as 4 (m) x 2 (n), each a 32x64 piece of
//          2 x 4 accumulators, so each A fragment feeds 4 MMAs and each B fragment 2 (6 fragment
//          loads per 8 MMAs instead of 3 per 2); k-slices of 16 (TF32) / 32 (bf16), two MMA
//          k-steps per barrier (the convolution's bf16 tile: 16, one step; see Bf16ConvLargeTile);
//          a 2-stage ring (cp.async one slice ahead for the fp32 operands whose rows run along
//          the shared rows, register prefetch for the others), 34 KiB of shared tiles + 8 KiB of
//          epilogue scratch, under the 48 KiB of static shared memory; or, TF32 only, the deep
//          ring of kDeepStages = 4 (Tf32DeepTile: cp.async 3 slices ahead, 68 KiB + 8 KiB in
//          dynamic shared memory, MmaShared, past 48 KiB by the launch's opt-in; register-
//          prefetched operands stay one slice ahead; cuda::set_mma_stages, ECHELON_MMA_STAGES=4;
//          the SGEMM only). A deep ring helps only cp.async operands: the bf16 tiles have none
//          (they round to bf16 while staging), and the implicit-GEMM convolution's k-contiguous
//          weights and grad_out go by cp.async only in the async-K tiles (below), its gathered
//          operands only in the gather tiles (below), so the conv has the deep ring only with
//          those. 64 accumulator registers
//          a thread. The staging loop is specialized per staging (kConstantStaging, as the FMA
//          warp-tiled tile's): ptxas gave these kernels 164-245 registers (smem28; 178-255 with
//          one loop for every staging), one block (8 warps) per SM, and at 2 blocks (128
//          registers) all spilled (bench/RESULTS.md, tc24 and tcreg24); since session 41 (one
//          staging address a thread, m16n8k8 fragments) the conv's take 120-126 and the TF32
//          SGEMM's 126-128, two blocks per SM (the deep async-K SGEMM 140, the bf16 SGEMM 164:
//          one). GPU speed not yet measured.
// bf16 fragments are loaded, and accumulators stored to the epilogue scratch, by the .shared forms
// of PTX's wmma.load / wmma.store with 32-bit shared addresses (load_shared,
// store_shared_row_major; wmma::load_matrix_sync's generic form became 64-bit generic LD.E, one
// address computation each): LDSM (ldmatrix.trans) (bench/RESULTS.md, smem28). TF32 fragments are
// plain LDS at constant offsets from one address a lane: ptxas had given each word of a TF32
// wmma.load its own address (the 128x128 tile's k-step loop: 92 instructions for 32 HMMA.1684; 50
// for 16 HMMA.1688, session 41; 42 with B's pairs by LDS.64, session 42: multiply_step_tf32).
// Shared rows of MmaLargeTile are padded by 8 elements (kPad). Both operands are stored k-major
// ([k][m] for A, loaded col_major; [k][n] for B, loaded row_major), so a fragment load reads, per
// lane, element (k, d) at k * ld + d with k and d from the lane's position in the fragment:
//   TF32 (the m16n8k8 products of C's transpose, multiply_step_tf32): lane 4 g + t reads A at
//          k = t (+ 4), m = g: words t * ld + g, and B at k = t (+ 4), n = 2 g, 2 g + 1 by one
//          64-bit load: words t * ld + 2 g (+ 1). With ld = 136 = 8 (mod 32) A's 32 lanes hit
//          banks 8 t + g, all different, and each half-warp of B's (a 64-bit load's phase)
//          8 t + 2 g (+ 1), all 32 once; the gemm_tile.cuh pad of 4 floats (ld = 4 mod 32) gives
//          4 t + g and 4 t + 2 g: 2-way conflicts.
//   bf16 (ldmatrix.trans: 16-byte rows, eight per phase): row k at k * ld * 2 bytes; with
//          ld = 136, 272 bytes = 16 (mod 128), so the eight rows fill the 128 bytes of the banks
//          once; a 16-element pad (288 = 32 mod 128) would put two rows on the same banks.
// Rows of 136 elements keep every fragment pointer 32-byte aligned (k-steps of 8 rows of 544
// bytes, 16 rows of 272; column offsets multiples of 16 elements) and every cp.async destination
// 16-byte aligned.
// The async-K TF32 tiles (Tf32AsyncKTile, 2 stages, and Tf32DeepAsyncKTile, 4; cuda::
// set_mma_async_k, ECHELON_MMA_ASYNC_K=1; the SGEMM, and the conv's forward and weight gradient
// as ConvConfig::async_k / stages, conv_gemm.cu): an aligned operand whose contiguous
// dimension is k (row-major A, transposed B) goes by cp.async too (Load::AsyncK, gemm_tile.cuh),
// 4 consecutive k a copy, into its stage seen as [d][k] (k_rows()): 128 rows of kK + 4 = 20
// floats, loaded as matrix_a row_major (A) / matrix_b col_major (B): lane 4 g + t reads d = g
// (+ 8), k = t (+ 4): words g * 20 + t, banks 20 g + t (mod 32) = {0, 20, 8, 28, 16, 4, 24, 12}
// + t: all 32 different. (Rows of 24: 24 g = 0 (mod 32) at g = 4, a 2-way conflict; 16 or 32:
// 4 to 8-way.) Its cp.async stores, 8 lanes (128 bytes) a phase: rows d, d + 1 at words 4 q and
// 20 + 4 q (q < 4), one 2-way overlap (words 0 and 32): the copies', not the fragments'. 80-byte
// rows keep destinations 16-byte aligned, fragment pointers 32-byte (16 rows = 1280 bytes, k-steps
// of 8 floats). The stage must hold either layout (an operand's is per launch): 128 x 20 = 2560
// floats > 16 x 136 = 2176, so these tiles pad the [k][d] rows by 40 (168 = 8 mod 32: the same
// conflict-free banks as 136; 16 x 168 = 2688 floats). 2 stages: 2 x 2 x 10,752 + 8 KiB scratch
// = 51,200 bytes, past the 48 KiB static limit (a [d][k]-only 2560-float stage would fit it
// exactly, 49,152, but not the d-contiguous operands), so both are dynamic (MmaShared, opt-in).
// The gather tiles (Tf32GatherTile, 2 stages, and Tf32DeepGatherTile, 4; the implicit-GEMM
// conv's ConvConfig::async_gather, cuda::set_conv_async_gather, ECHELON_CONV_ASYNC_GATHER=1,
// every pass): async-K tiles whose element-wise operands (the gathers of x and grad_out, and the
// weights where they are not runs of 4) go by 4-byte cp.async too (Load::AsyncGather,
// gemm_tile.cuh), each element into the [k][d] place a register store would give it, zero-filled
// (src-size 0) in the padding and past the edges, as CUTLASS's Ampere conv iterators gather. No
// operand waits in registers: ptxas gives the forward and grad input 118-128 registers (2 blocks
// per SM; the register-staged tile: 169-179, one), the weight gradient 154-156 (its launch bound
// asks for one block: left free, ptxas capped the 4-stage one at 128 and spilled), no spill
// (bench/RESULTS.md, gather27, smem28). The async-K tiles' shared memory. GPU speed not yet
// measured.
#pragma once

#include <cstddef>
#include <cstring>
#include <type_traits>

#include <mma.h>

#include "gemm_tile.cuh"

namespace echelon::cuda::tile {

// The 128x128 tensor-core tile: the members the staging (Part, Slice, for_each_slice) reads, and
// the warp grid MmaWarps takes. E: float (TF32) or __nv_bfloat16; K: the k-slice depth, by default
// two MMA k-steps; Stages: the ring's depth (2: static shared memory; more: dynamic, MmaShared).
// AsyncK: k-contiguous aligned operands by cp.async into [d][k] rows (TF32 only; see the top).
// AsyncGather: the element-wise operands (the conv's gathers) by 4-byte cp.async (the gather
// tiles; with AsyncK, so that no operand of theirs waits in registers).
template <typename E, int K = (std::is_same_v<E, float> ? 16 : 32), int Stages = 2,
          bool AsyncK = false, bool AsyncGather = false>
struct MmaLargeTile {
  using Elem = E;
  static constexpr bool kFloat = std::is_same_v<E, float>;
  static_assert(!AsyncK || kFloat, "bf16 tiles round while staging: no cp.async");
  static_assert(!AsyncGather || AsyncK, "the gather tiles are async-K tiles");
  static constexpr int kM = 128, kN = 128;
  static constexpr int kK = K;
  static constexpr int kPad = AsyncK ? 40 : 8;  // see the top: conflict-free fragment loads
  static constexpr int kStages = Stages;        // 2: 2 x 16 x 136 x 4 B x 2 = 34 KiB
  static constexpr bool kAsyncK = AsyncK;
  static constexpr bool kAsyncGather = AsyncGather;
  static constexpr bool kDynamicRing = Stages > 2 || AsyncK;  // the ring in MmaShared, dynamic
  static constexpr int kWarpsM = 4;               // warps along m; each owns 32 x 64 of C
  static constexpr bool kWarpTiled = false;       // not the FMA warp tiles (conv_gemm.cu asks)
  static constexpr bool kConstantStaging = true;  // gemm_tile.cuh's staging, one loop per staging
  static constexpr bool kTf32Staged = kFloat;     // gemm_tile.cuh's tf32_when_staged
};
using Tf32LargeTile = MmaLargeTile<float>;
// The deep TF32 ring: 4 stages, not 3. Shared memory is not what limits residency: 4 x 17 KiB
// + 8 KiB = 76 KiB (3 stages: 59 KiB) of the SM's 227 KiB fits 2 blocks, and the 4th stage puts 48
// k in flight instead of 32 (CUTLASS's sm80 TF32 128x128x32 at 3 stages: 64). One deep count only:
// each is one more SGEMM instantiation for nvcc.
constexpr int kDeepStages = 4;
using Tf32DeepTile = MmaLargeTile<float, 16, kDeepStages>;
using Tf32AsyncKTile = MmaLargeTile<float, 16, 2, true>;
using Tf32DeepAsyncKTile = MmaLargeTile<float, 16, kDeepStages, true>;
// The implicit-GEMM convolution's gather tiles (conv_gemm.cu, ConvConfig::async_gather): every
// operand by cp.async, the gathered ones 4 bytes a copy; the async-K tiles' shared memory.
using Tf32GatherTile = MmaLargeTile<float, 16, 2, true, true>;
using Tf32DeepGatherTile = MmaLargeTile<float, 16, kDeepStages, true, true>;
using Bf16LargeTile = MmaLargeTile<__nv_bfloat16>;
// The convolution's bf16 tile: one MMA k-step per slice. Its gathers' registers (16 elements per
// thread and operand at k-slices of 32) made the 32-deep forward and grad input spill.
using Bf16ConvLargeTile = MmaLargeTile<__nv_bfloat16, 16>;

constexpr int kFrag = 16, kWarps = kThreads / 32;

// The shared memory of a tensor-core kernel on a deep ring (T::kStages > 2), one dynamic block
// (ECH_DYNAMIC_SHARED_ALIGNED, 128 bytes; each member's size a multiple of 32 bytes, so every
// fragment pointer stays 32-byte aligned): the launch asks for sizeof(MmaShared<T>) bytes and
// opts in past 48 KiB (launch.h, opt_in_dynamic_shared). The 2-stage tiles keep their three
// static arrays.
template <typename T>
struct MmaShared {
  ATiles<T> a;                           // [stage][k][m] = op(A)(m0+m, k0+k)
  BTiles<T> b;                           // [stage][k][n] = op(B)(k0+k, n0+n)
  float scratch[kWarps][kFrag * kFrag];  // one accumulator per warp, row-major
};
template <typename T>
constexpr bool dynamic_ring() {  // only MmaLargeTile's deep rings (the FMA tiles have 3 static)
  if constexpr (requires { T::kDynamicRing; })
    return T::kDynamicRing;
  else
    return false;
}
template <typename T>
constexpr bool kDynamicRing = dynamic_ring<T>();
template <typename T>
constexpr size_t mma_dynamic_shared() {
  return kDynamicRing<T> ? sizeof(MmaShared<T>) : 0;
}
static_assert(sizeof(ATiles<Tf32DeepTile>) % 32 == 0 && sizeof(BTiles<Tf32DeepTile>) % 32 == 0);
static_assert(sizeof(MmaShared<Tf32DeepTile>) == 77824);  // 76 KiB: the top's arithmetic
static_assert(sizeof(MmaShared<Tf32AsyncKTile>) == 51200 &&
              sizeof(MmaShared<Tf32DeepAsyncKTile>) == 94208);
static_assert(sizeof(ATiles<Tf32DeepAsyncKTile>) % 32 == 0);
static_assert(sizeof(MmaShared<Tf32GatherTile>) == sizeof(MmaShared<Tf32AsyncKTile>) &&
              sizeof(MmaShared<Tf32DeepGatherTile>) == sizeof(MmaShared<Tf32DeepAsyncKTile>));

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // TF32 and bf16 tensor cores: sm_80 or newer

namespace wmma = nvcuda::wmma;

// bf16 fragment loads from, and the accumulator store to, shared memory. wmma::load_matrix_sync
// takes a generic pointer: nvcc emits the generic wmma.load, which ptxas lowers to 64-bit LD.E,
// each with its own address arithmetic (__builtin_assume(__isShared(p)) does not help); the
// .shared form with a 32-bit shared address gives LDSM. The registers are the fragment's storage
// in order, as crt/mma.hpp's builtins write it (bf16 A / B: 4 words; the fp32 accumulator: 8).
// The emulation build keeps wmma::load_matrix_sync / store_matrix_sync (cuda/sim/include/mma.h).
// TF32 needs neither: its m16n8k8 fragments are plain shared loads (mma_m16n8k8_tf32, below).
template <typename Use, typename Layout, typename Frag>
constexpr bool kFragIs =
    std::is_same_v<Frag, wmma::fragment<Use, kFrag, kFrag, 16, __nv_bfloat16, Layout>>;

template <typename Frag>
__device__ __forceinline__ void load_shared(Frag& frag, const __nv_bfloat16* p,
                                            unsigned ldm ECH_TILE_SITE) {
#ifdef __CUDA_ARCH__
  using wmma::col_major, wmma::matrix_a, wmma::matrix_b, wmma::row_major;
  static_assert(kFragIs<matrix_a, col_major, Frag> || kFragIs<matrix_b, row_major, Frag>);
  unsigned r[4];  // memcpy'd into frag.x below: no type punning through pointers
  static_assert(sizeof r == sizeof frag.x);
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(p));
#define ECH_LOAD_SHARED(op)                                     \
  asm volatile(op " {%0, %1, %2, %3}, [%4], %5;"                \
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) \
               : "r"(shared), "r"(ldm))
  if constexpr (kFragIs<matrix_a, col_major, Frag>)  // the [k][m] stage
    ECH_LOAD_SHARED("wmma.load.a.sync.aligned.col.m16n16k16.shared.bf16");
  else  // B from the [k][n] stage
    ECH_LOAD_SHARED("wmma.load.b.sync.aligned.row.m16n16k16.shared.bf16");
#undef ECH_LOAD_SHARED
  std::memcpy(frag.x, r, sizeof r);
#else
  wmma::load_matrix_sync(frag, p, ldm ECH_TILE_SITE_ARGS);
#endif
}

// The bf16 accumulator (16x16x16) to shared p, row-major.
__device__ __forceinline__ void store_shared_row_major(
    float* p, const wmma::fragment<wmma::accumulator, kFrag, kFrag, 16, float>& acc,
    unsigned ldm ECH_TILE_SITE) {
#ifdef __CUDA_ARCH__
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(p));
  const float* x = acc.x;
  asm volatile(
      "wmma.store.d.sync.aligned.row.m16n16k16.shared.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, "
      "%8}, %9;" ::"r"(shared),
      "f"(x[0]), "f"(x[1]), "f"(x[2]), "f"(x[3]), "f"(x[4]), "f"(x[5]), "f"(x[6]), "f"(x[7]),
      "r"(ldm)
      : "memory");
#else
  wmma::store_matrix_sync(p, acc, ldm, wmma::mem_row_major ECH_TILE_SITE_ARGS);
#endif
}

// d (16 x 8) += a (16 x 8) b (8 x 8) in TF32, PTX's mma.sync m16n8k8 on registers in its
// documented layout (lane 4 g + t: a = (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); b = (t, g),
// (t + 4, g); d = (g, 2 t), (g, 2 t + 1), (g + 8, 2 t), (g + 8, 2 t + 1)). One HMMA.1688 where the
// 16x16x8 WMMA fragments gave four HMMA.1684 per two of these, and loads at constant offsets from
// one address a lane (MmaWarps::multiply_step). The emulation build has it in cuda/sim/include/
// mma.h, computed as its mma_sync.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const float (&a)[4],
                                                 const float (&b)[2] ECH_TILE_SITE) {
#ifdef __CUDA_ARCH__
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(__float_as_uint(a[0])), "r"(__float_as_uint(a[1])), "r"(__float_as_uint(a[2])),
        "r"(__float_as_uint(a[3])), "r"(__float_as_uint(b[0])), "r"(__float_as_uint(b[1])));
#elif ECHELON_CUDA_SIM
  wmma::mma_m16n8k8_tf32(d, a, b ECH_TILE_SITE_ARGS);
#endif  // nvcc's host pass: never called there
}

// Warps along m: the tile's own choice, else one 16-row fragment each (the gemm_tile.cuh shapes).
template <typename T>
constexpr int mma_warps_m() {
  if constexpr (requires { T::kWarpsM; })
    return T::kWarpsM;
  else
    return T::kM / kFrag;
}

// The tensor-core block tile: warps tile C as kWarpsM x (kWarps / kWarpsM), each a kWarpM x
// kWarpN piece of kFragsM x kFragsN accumulators; a staged k-slice is kSteps MMA k-steps (K = 8
// for TF32, 16 for bf16). Shared tiles must be 32-byte aligned (every fragment pointer then is).
template <typename T>
struct MmaWarps {
  using E = typename T::Elem;
  static constexpr bool kTf32 = std::is_same_v<E, float>;
  static constexpr int kMmaK = kTf32 ? 8 : 16, kSteps = T::kK / kMmaK;
  static constexpr int kWarpsM = mma_warps_m<T>();
  static constexpr int kWarpM = T::kM / kWarpsM, kWarpN = T::kN / (kWarps / kWarpsM);
  static constexpr int kFragsM = kWarpM / kFrag, kFragsN = kWarpN / kFrag;
  static_assert(kWarps % kWarpsM == 0 && kWarpM % kFrag == 0 && kWarpN % kFrag == 0);
  static_assert(T::kK % kMmaK == 0);

  int warp_m, warp_n, lane;
  // B's stage is [n][k] (an AsyncK B): the TF32 products' rows are then B's columns g, g + 8, not
  // 2 g, 2 g + 1 (multiply_step_tf32); store_tile reads it. Per launch; set by multiply.
  bool b_rows = false;
  // [i * kFragsN + f]: the 16x16 piece (i, f) of the warp's C. TF32: the two m16n8k8 products of
  // its transpose, 16 columns by 8 rows each (multiply_step_tf32); bf16: a WMMA accumulator.
  std::conditional_t<
      kTf32, float[kFragsM * kFragsN][2][4],
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kMmaK, float>[kFragsM * kFragsN]>
      acc;

  __device__ MmaWarps() {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    lane = static_cast<int>(threadIdx.x) % 32;
    warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
#pragma unroll
    for (int i = 0; i < kFragsM * kFragsN; ++i) {
      if constexpr (kTf32) {
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e / 4][e % 4] = 0.0f;
      } else {
        wmma::fill_fragment(acc[i], 0.0f);
      }
    }
  }

  // acc += the products of one staged k-slice (a warp collective). The k-steps of the 128x128
  // tile are not unrolled: unrolled, ptxas loads both steps' fragments at once, and its bf16
  // SGEMM went past 255 registers (a spill); a loop around the single step of the gemm_tile.cuh
  // shapes cost registers there (three of their conv kernels spilled under their caps).
  // ARows / BRows: the stage holds that operand as [d][k] (an AsyncK operand, k_rows()).
  // round_a / round_b: round that operand's TF32 fragments (false: it was rounded when staged).
  template <bool ARows = false, bool BRows = false>
  __device__ __forceinline__ void multiply(const ATile<T>& a_tile, const BTile<T>& b_tile,
                                           bool round_a = true, bool round_b = true) {
    if constexpr (kSteps == 1) {
      multiply_step<ARows, BRows>(a_tile, b_tile, 0, round_a, round_b);
    } else {
#pragma unroll 1
      for (int step = 0; step < kSteps; ++step)
        multiply_step<ARows, BRows>(a_tile, b_tile, step * kMmaK, round_a, round_b);
    }
  }

  // multiply, reading each operand's stage in the layout its staging left and rounding the
  // fragments of those operands that were not rounded when staged (gemm_tile.cuh,
  // tf32_when_staged: register-staged operands of the 128x128 TF32 tiles are; cp.async ones
  // never). with_constant_staging makes st a constant, so one branch remains per staging.
  __device__ __forceinline__ void multiply(const ATile<T>& a_tile, const BTile<T>& b_tile,
                                           const Staging& st) {
    const auto in_registers = [](Load load) {
      return load == Load::Scalar || load == Load::Vector;
    };
    const bool round_a = !(tf32_when_staged<T>() && in_registers(st.a));
    const bool round_b = !(tf32_when_staged<T>() && in_registers(st.b));
    if constexpr (async_k<T>()) {
      const bool a_rows = st.a == Load::AsyncK;
      b_rows = st.b == Load::AsyncK;
      if (a_rows && b_rows)
        multiply<true, true>(a_tile, b_tile, round_a, round_b);
      else if (a_rows)
        multiply<true, false>(a_tile, b_tile, round_a, round_b);
      else if (b_rows)
        multiply<false, true>(a_tile, b_tile, round_a, round_b);
      else
        multiply(a_tile, b_tile, round_a, round_b);
    } else {
      multiply(a_tile, b_tile, round_a, round_b);
    }
  }

  // acc += the products of the slice's rows k.. k + kMmaK: the warp's kFragsM A fragments stay
  // in registers while its B fragments stream past them.
  template <bool ARows, bool BRows>
  __device__ __forceinline__ void multiply_step(const ATile<T>& a_tile, const BTile<T>& b_tile,
                                                int k, bool round_a, bool round_b) {
    if constexpr (kTf32)
      multiply_step_tf32<ARows, BRows>(a_tile, b_tile, k, round_a, round_b);
    else
      multiply_step_wmma(a_tile, b_tile, k);
  }

  // TF32: each m16n8k8 product computes a 16 (n) x 8 (m) piece of C transposed, C^T += B^T A^T:
  // B's columns are the product's rows (its A operand), A's rows its columns (its B operand). A
  // product's rows may stand for any 16 columns of B, so long as store_tile puts each sum back
  // where it came from: in a [k][n] stage lane 4 g + t takes columns 2 g and 2 g + 1 of a
  // 16-column piece as rows g and g + 8 (a0..a3 = B(t, 2 g), B(t, 2 g + 1), B(t + 4, 2 g),
  // B(t + 4, 2 g + 1)): side by side, one 64-bit load (LDS.64) a pair, where the documented
  // order's rows g, g + 8 took two. A half-warp's pairs are words 8 t + 2 g (+ 1) (mod 32) at the
  // 128x128 tile's ld = 136: all 32 banks, once. A's words stay one load each (b0, b1 = A(g, t),
  // A(g, t + 4): two k). In a [d][k] stage (ARows / BRows) a pair would be two rows, 2-way
  // conflicted: B's rows there stay g, g + 8, and store_tile asks (b_rows). Per k-step of the
  // 128x128 tile: 8 LDS.64 + 8 LDS where the m16n8k8 order of A and B took 24 LDS.
  template <bool ARows, bool BRows>
  __device__ __forceinline__ void multiply_step_tf32(const ATile<T>& a_tile, const BTile<T>& b_tile,
                                                     int k, bool round_a, bool round_b) {
    const int g = lane / 4, t = lane % 4;
    const auto a_at = [&](int m, int kk) {
      if constexpr (ARows)
        return k_rows<T::kM>(a_tile)[m][kk];
      else
        return a_tile[kk][m];
    };
    const auto b_pair = [&](int kk, int n) {  // the product's rows g, g + 8: B (kk, n), (kk, n')
      if constexpr (BRows)
        return float2{k_rows<T::kN>(b_tile)[n][kk], k_rows<T::kN>(b_tile)[n + 8][kk]};
      else
        return *reinterpret_cast<const float2*>(&b_tile[kk][n]);  // n' = n + 1, n even
    };
    const auto tf32 = [](float v, bool round) { return round ? wmma::__float_to_tf32(v) : v; };
    float a[kFragsM][2][2];  // [16-row piece][8-row half]: A (m, k + t), A (m, k + t + 4)
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int m = warp_m * kWarpM + i * kFrag + half * 8 + g;
        a[i][half][0] = tf32(a_at(m, k + t), round_a);
        a[i][half][1] = tf32(a_at(m, k + t + 4), round_a);
      }
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) {
      const int n = warp_n * kWarpN + f * kFrag + (BRows ? g : 2 * g);
      const float2 low_k = b_pair(k + t, n), high_k = b_pair(k + t + 4, n);
      const float b[4] = {tf32(low_k.x, round_b), tf32(low_k.y, round_b), tf32(high_k.x, round_b),
                          tf32(high_k.y, round_b)};
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half)
          mma_m16n8k8_tf32(acc[i * kFragsN + f][half], b, a[i][half]);
    }
  }

  // bf16: WMMA fragments from the [k][d] stages (bf16 tiles have no async-K rows: MmaLargeTile).
  __device__ __forceinline__ void multiply_step_wmma(const ATile<T>& a_tile, const BTile<T>& b_tile,
                                                     int k) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kMmaK, __nv_bfloat16, wmma::col_major> a[kFragsM];
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
      load_shared(a[i], &a_tile[k][warp_m * kWarpM + i * kFrag], T::kM + T::kPad);
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kMmaK, __nv_bfloat16, wmma::row_major> b;
      load_shared(b, &b_tile[k][warp_n * kWarpN + f * kFrag], T::kN + T::kPad);
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
        wmma::mma_sync(acc[i * kFragsN + f], a[i], b, acc[i * kFragsN + f]);
    }
  }

  // Calls store(m, n, value) for the warp's outputs, through `out` (this warp's 16x16 scratch,
  // 32-byte aligned), so that bounds checks and epilogues stay per element as in the FMA kernel.
  // Each lane stores 8 elements per fragment, in rows of 16 consecutive columns per half-warp.
  template <typename Store>
  __device__ __forceinline__ void store_tile(float* out, int64_t m0, int64_t n0, Store store) {
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
      for (int f = 0; f < kFragsN; ++f) {
        if constexpr (kTf32) {
          // Sum q of product `half` is its (g + 8 (q / 2), 2 t + q % 2) (multiply_step_tf32):
          // C's row half * 8 + 2 t + q % 2, and column 2 g + q / 2 ([k][n] stage of B) or
          // g + 8 (q / 2) ([n][k]).
          const int g = lane / 4, t = lane % 4;
          const auto& sums = acc[i * kFragsN + f];
#pragma unroll
          for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              float* row = out + (half * 8 + 2 * t + c) * kFrag;
              if (b_rows)
                row[g] = sums[half][c], row[g + 8] = sums[half][c + 2];
              else
                *reinterpret_cast<float2*>(row + 2 * g) = float2{sums[half][c], sums[half][c + 2]};
            }
        } else {
          store_shared_row_major(out, acc[i * kFragsN + f], kFrag);
        }
        __syncwarp();  // the lanes read each other's stored elements
        // Lane l stores column l % 16, rows l / 16 + 2 r: one column a lane, written so (until
        // session 42 the column was e % 16 of a loop over e), so that the store's column math is
        // visibly the same for the lane's 8 elements and leaves the loop (ConvOperands::store; the
        // conv's 4-element loop body 144 -> 81 instructions, grad input's 145 -> 41). Unrolled by
        // 4, not 8: fully unrolled, the 64x64 bf16 tiles took 4-8 more registers (the SGEMM's
        // spilled under its 3-block bound).
        const int64_t n = n0 + warp_n * kWarpN + f * kFrag + lane % kFrag;
#pragma unroll 4
        for (int r = 0; r < kFrag * kFrag / 32; ++r) {
          const int row = lane / kFrag + r * (32 / kFrag);
          store(m0 + warp_m * kWarpM + i * kFrag + row, n, out[row * kFrag + lane % kFrag]);
        }
        __syncwarp();  // out is overwritten by the next fragment
      }
  }
};

#endif

}  // namespace echelon::cuda::tile
