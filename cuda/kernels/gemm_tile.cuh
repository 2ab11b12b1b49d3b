// The block-tile machinery our GEMM kernels share: the dense SGEMM (cuda/kernels/matmul.cu) and
// the implicit-GEMM convolution (cuda/kernels/conv_gemm.cu). What differs between them is only
// where an element of op(A) or op(B) comes from and where an element of C goes, so both hand
// the staging loop an *operand loader*: an object with
//   float a(int64_t m, int64_t k) const   op(A)(m, k), zero outside the matrix
//   float b(int64_t k, int64_t n) const   op(B)(k, n), zero outside the matrix
//   bool a_k_fastest() const              A's storage has k contiguous (else m)
//   bool b_k_fastest() const              B's storage has k contiguous (else n)
//   bool a_vector() const, b_vector()     runs of 4 along the fastest dimension may be read as
//                                         16-byte vectors (aligned base, leading dimension and
//                                         batch stride multiples of 4 floats; per launch)
//   int a_span(m, k, const float*& p)     for vector operands: how many (0..4) of the 4 elements
//   int b_span(k, n, const float*& p)     from (m, k) / (k, n) along the fastest dimension lie
//                                         inside, p their 16-byte aligned address (when 0: any
//                                         aligned address of the operand: a cp.async source)
// The k_fastest flags order the global loads so that neighbouring threads read neighbouring
// addresses.
//
// Each 256-thread block computes a TM x TN tile of C, walking K in k-slices of kK (8; 16 for
// bf16). The block stages a (kK x TM) slice of op(A) and a (kK x TN) slice of op(B) in shared
// memory (k-major, so a thread reads its rows / columns as 16-byte vectors), and each thread
// keeps a ThM x ThN sub-tile of C in registers. Two FMA cores place those sub-tiles:
//   block-strided (multiply_slice, store_fma_tile in fma_tile.cuh; every tile but LargeWarpTile):
//     a thread's columns are groups of 4, TN / (ThN / 4) apart (not adjacent): a quarter-warp's
//     16-byte loads then cover 32 consecutive floats, one per bank (adjacent columns per thread
//     made lanes 0 and 4 collide: a 2-way bank conflict). Rows likewise. A warp spans 2 thread rows
//     and all 16 thread columns of the 128x128 tile: its B reads touch 256 bytes, 2 wavefronts;
//   warp-tiled (FmaWarps, fma_tile.cuh; LargeWarpTile, the default 128x128 fp32 tile, see
//     cuda::set_fma_warp_tiles): each warp owns a contiguous 32x64 piece, one wavefront a read,
//     and the fragments of k + 1 load while k's FMAs run. Its staging loop is specialized per
//     staging (with_constant_staging) and its staging indices are pinned (pinned()), which took
//     the SGEMM from 213 registers to 128 without spill: 2 blocks per SM.
// Both sum each output as one thread's fmaf chain over k in order: the same bits.
// Shared rows are padded by 16 bytes to spread the transposed stores over the banks.
// How an operand's slices reach shared memory (Load, per launch, so no extra instantiations):
//   Scalar  one bounds-checked element per load (a()/b()), held in registers, stored after the
//           current slice's FMAs (register prefetch): transposed-to-shared or unaligned operands;
//   Vector  the same with 16-byte global loads (a_span()/b_span()): aligned operands whose
//           contiguous dimension is k (their shared store is a transpose), and every aligned
//           operand of the bf16 tiles (which round to bf16 while staging);
//   Async   cp.async of 16 bytes straight into shared memory, kStages - 1 slices ahead of the
//           FMAs (these tiles' 3-stage ring: 2; mma_tile.cuh's 128x128 tile: 1, or 3 in its
//           4-stage ring in dynamic shared memory): aligned fp32/TF32 operands contiguous along
//           m (A) / n (B), the shared rows' direction; tails and the matrix edge are zero-filled
//           by the copy. Register operands stay one slice ahead whatever the ring's depth.
//   AsyncK  cp.async of 4 consecutive k into a [d][k] tile (k_rows(): rows of kK + kVec): aligned
//           fp32 operands whose contiguous dimension is k, in mma_tile.cuh's async-K tiles only
//           (T::kAsyncK; there it replaces Vector; cuda::set_mma_async_k, ECHELON_MMA_ASYNC_K=1).
//           The multiply must then read that operand's stage as [d][k] (run_slices hands it the
//           staging).
//   AsyncGather  cp.async of one element (4 bytes) a copy into the same [k][d] place a Scalar
//           operand's register store would put it, zero-filled (src-size 0) where the element is
//           padding or outside the matrix: the operands a loader gathers element by element (the
//           convolution's im2col views), in mma_tile.cuh's gather tiles only (T::kAsyncGather;
//           there it replaces Scalar; ConvConfig::async_gather, ECHELON_CONV_ASYNC_GATHER=1). The
//           loader then also provides a_at(m, k, p) / b_at(k, n, p): whether the element is
//           inside, p its address (else any 4-byte aligned address of the operand).
// The copies go through cp_async (below): inline PTX cp.async, the 16-byte ones with the zero
// fill's size in a register (one LDGSTS; __pipeline_memcpy_async branched over every size).
// One barrier per slice: slice s's async copies are waited for (each thread its own:
// __pipeline_wait_prior(kStages - 2) leaves the younger slices' groups in flight) and the
// barrier makes every thread's copies and register stores of slice s visible and frees the
// stage that slice s - 1 used, which then receives slice s + kStages - 1's copies.
// Tensor cores: cuda/kernels/mma_tile.cuh (the same staging, MMA fragments instead of FMAs).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <echelon/cuda/launch.h>

#include "pinned.cuh"

namespace echelon::cuda::tile {

constexpr int kVec = 4, kThreads = 256;

// Blocks a launch should have before a larger tile or fewer split-K groups are worth it (the
// launchers of matmul.cu and conv_gemm.cu). The emulation build uses a few, so that test-sized
// problems reach every tile and split.
#if ECHELON_CUDA_SIM
constexpr int64_t kFillBlocks = 4;
#else
constexpr int64_t kFillBlocks = 2 * 132;  // two blocks per SM of an H200; to tune on the GPU
#endif

constexpr int ceil_div_int(int a, int b) {
  return (a + b - 1) / b;
}

// The caller's file and line, which the emulator's diagnostics name (cuda/sim): the wrappers below
// (cp_async here, mma_tile.cuh's fragment loads) take them in the emulation build and pass them on.
#if ECHELON_CUDA_SIM
#define ECH_TILE_SITE , const char *file = __builtin_FILE(), int line = __builtin_LINE()
#define ECH_TILE_SITE_ARGS , file, line
#else
#define ECH_TILE_SITE
#define ECH_TILE_SITE_ARGS
#endif

// cp.async of Bytes (16 or 4) from global src to shared dst, of which the first src_bytes are
// read and the rest zero-filled (16: src_bytes 0..16, the vector operands' tails and edges; 4: 0
// or 4, the gathers). __pipeline_memcpy_async takes the zero fill as a constant: given a run-time
// one, nvcc branched over every size (5 arms for 16 bytes, each recomputing the shared address,
// and a trap). 16 bytes: the PTX's src-size in a register, one LDGSTS (.cg, L1 bypassed, as
// __pipeline_memcpy_async's). 4 bytes (.ca, the only form for 4): a branch on src_bytes between
// the two constant forms; src-size in a register there, or the ignore-src predicate, made the
// 2-stage forward gather tile spill at its 128-register bound (40 bytes; bench/RESULTS.md,
// smem28). The emulation build keeps __pipeline_memcpy_async, whose model checks the zero fill.
template <unsigned Bytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src,
                                         unsigned src_bytes ECH_TILE_SITE) {
  static_assert(Bytes == 16 || Bytes == 4);
#ifdef __CUDA_ARCH__
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared), "l"(src),
                 "r"(src_bytes)
                 : "memory");
  else if (src_bytes != 0)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(shared), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, 0;" ::"r"(shared), "l"(src) : "memory");
#else
  __pipeline_memcpy_async(dst, src, Bytes, Bytes - src_bytes ECH_TILE_SITE_ARGS);
#endif
}

// E: what the shared tiles hold (float for FMA and TF32, __nv_bfloat16 for bf16). WarpTiled: the
// FMA kernels use the warp-tiled core (FmaWarps, fma_tile.cuh) instead of multiply_slice.
// kConstantStaging: the staging loop is specialized per staging and its indices pinned (see
// for_each_slice): the warp-tiled tile and mma_tile.cuh's MmaLargeTile.
template <int TM, int TN, int ThM, int ThN, typename E = float, bool WarpTiled = false>
struct Tile {
  using Elem = E;
  static constexpr bool kFloat = std::is_same_v<E, float>;
  static constexpr bool kWarpTiled = WarpTiled;
  static constexpr bool kConstantStaging = WarpTiled;
  static constexpr int kM = TM, kN = TN, kThM = ThM, kThN = ThN;
  static constexpr int kK = kFloat ? 8 : 16;                     // k-slice depth: one MMA's k
  static constexpr int kPad = 16 / static_cast<int>(sizeof(E));  // 16 bytes a shared row
  static constexpr int kRows = TM / ThM, kCols = TN / ThN;       // threads along m and n
  static constexpr int kStages = kFloat ? 3 : 2;  // cp.async runs 2 slices ahead; bf16 has none
  static_assert(kRows * kCols == kThreads && ThM % kVec == 0 && ThN % kVec == 0);
  static_assert(TM % kVec == 0 && TN % kVec == 0);
};
using LargeTile = Tile<128, 128, 8, 8>;
// The same tile with the warp-tiled FMA core at 2 blocks per SM (cuda::fma_warp_tiles picks it).
using LargeWarpTile = Tile<128, 128, 8, 8, float, true>;
using SmallTile = Tile<64, 64, 4, 4>;
// Few rows, many columns: conv GEMMs whose M is a small channel count waste most of a 64-row
// tile; 32 rows (17..32 channels) and 16 rows (up to 16: the 6 and 16 channels of LeNet-5 and
// ResNet-20's first stage) keep 16 outputs per thread.
using NarrowTile = Tile<32, 128, 4, 4>;
using TinyTile = Tile<16, 256, 4, 4>;
// The bf16 tensor-core tiles (MmaWarps only; ThM, ThN unused there).
using Bf16SmallTile = Tile<64, 64, 4, 4, __nv_bfloat16>;
using Bf16NarrowTile = Tile<32, 128, 4, 4, __nv_bfloat16>;
using Bf16TinyTile = Tile<16, 256, 4, 4, __nv_bfloat16>;

// Shared-memory tiles, a ring of kStages: [stage][k][m] of op(A), [stage][k][n] of op(B).
template <typename T>
using ATiles = typename T::Elem[T::kStages][T::kK][T::kM + T::kPad];
template <typename T>
using BTiles = typename T::Elem[T::kStages][T::kK][T::kN + T::kPad];
template <typename T>
using ATile = typename T::Elem[T::kK][T::kM + T::kPad];  // one stage
template <typename T>
using BTile = typename T::Elem[T::kK][T::kN + T::kPad];

// v for the tensor cores only: half a TF32 ulp added to its bits (finite v), the low 13 bits left
// as they fall. The tensor cores read a TF32 operand's upper 19 bits only (they truncate, as the
// emulator's MMA does), and those are v rounded to nearest, ties away: __float_to_tf32(v), whose
// result as a stored float has its low bits cleared too, one more instruction an element (ptxas
// clears them when the value goes to memory, not when it goes straight into an MMA). A carry
// into the exponent is the rounding up it should be; infinities and NaNs stay (a NaN such as
// 0x7fffffff would carry into the sign bit: -0 to the tensor cores).
__device__ __forceinline__ float tf32_for_mma(float v) {
  if (!(std::fabs(v) < INFINITY)) return v;  // one FSETP; a test of the exponent's bits took two
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x1000u;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// A loaded fp32 value as the shared tiles hold it (bf16: rounded to nearest even; Tf32: a float
// tile of tf32_when_staged's, which only the tensor cores read: tf32_for_mma).
template <typename E, bool Tf32 = false>
__device__ __forceinline__ E to_tile(float v) {
  if constexpr (!std::is_same_v<E, float>)
    return __float2bfloat16_rn(v);
  else if constexpr (Tf32)
    return tf32_for_mma(v);
  else
    return v;
}

// Whether T's register-staged TF32 operands (Scalar, Vector) are rounded as they are stored to
// shared memory rather than in every fragment loaded from it (mma_tile.cuh's 128x128 TF32 tiles).
// Each element is staged once but loaded into the fragments of 2 (A) or 4 (B) warps, each round
// 2 instructions: a thread's 48 fragment roundings a 16-deep slice become 16 at staging
// (3 each, tf32_for_mma; 4 with __float_to_tf32 until session 41). The multiply skips only those
// operands' rounding (MmaWarps::multiply); cp.async operands land unrounded and keep theirs.
template <typename T>
constexpr bool tf32_when_staged() {
  if constexpr (requires { T::kTf32Staged; })
    return T::kTf32Staged;
  else
    return false;
}

enum class Load : int { Scalar, Vector, Async, AsyncK, AsyncGather };

// Whether T stages its k-contiguous aligned operands by cp.async (Load::AsyncK): mma_tile.cuh's
// async-K TF32 tiles.
template <typename T>
constexpr bool async_k() {
  if constexpr (requires { T::kAsyncK; })
    return T::kAsyncK;
  else
    return false;
}

// Whether T stages its element-wise (non-vector) operands by 4-byte cp.async (Load::AsyncGather):
// mma_tile.cuh's gather tiles.
template <typename T>
constexpr bool async_gather() {
  if constexpr (requires { T::kAsyncGather; })
    return T::kAsyncGather;
  else
    return false;
}

// An AsyncK operand's stage seen as [d][k]: D rows of K + kVec elements (16-byte aligned rows;
// mma_tile.cuh sizes the stage to hold them and explains the pad) in the storage of tile[k][d].
template <int D, int K, typename E, int W>
__device__ __forceinline__ E (&k_rows(E (&tile)[K][W]))[D][K + kVec] {
  static_assert(D * (K + kVec) <= K * W, "the [d][k] rows must fit the stage");
  return *reinterpret_cast<E(*)[D][K + kVec]>(&tile);
}
template <int D, int K, typename E, int W>
__device__ __forceinline__ const E (&k_rows(const E (&tile)[K][W]))[D][K + kVec] {
  static_assert(D * (K + kVec) <= K * W, "the [d][k] rows must fit the stage");
  return *reinterpret_cast<const E(*)[D][K + kVec]>(&tile);
}

// How each operand of a launch is staged (see the top): vector operands go by cp.async when the
// tiles are fp32 and their contiguous dimension is the shared rows' (m for A, n for B), or k in
// the async-K tiles; the others element by element, by cp.async in the gather tiles.
struct Staging {
  Load a, b;
  bool a_k, b_k;  // the loader's a_k_fastest(), b_k_fastest()
  __device__ bool any_async() const {
    return a == Load::Async || b == Load::Async || a == Load::AsyncK || b == Load::AsyncK ||
           a == Load::AsyncGather || b == Load::AsyncGather;
  }
};
template <typename T, typename Operands>
__device__ __forceinline__ Staging staging_of(const Operands& ops) {
  const bool a_k = ops.a_k_fastest(), b_k = ops.b_k_fastest();
  const auto pick = [](bool vector, bool k_fastest) {
    constexpr Load kElement = async_gather<T>() ? Load::AsyncGather : Load::Scalar;
    return !vector                     ? kElement
           : T::kFloat && !k_fastest   ? Load::Async
           : async_k<T>() && T::kFloat ? Load::AsyncK
                                       : Load::Vector;
  };
  return {pick(ops.a_vector(), a_k), pick(ops.b_vector(), b_k), a_k, b_k};
}

// One operand's share of a k-slice of D (kM or kN) by K elements; d is the operand's m or n.
// get(d, k) reads one element, span(d, k, p) a run of 4 (the loader's a/b, a_span/b_span).
// Pin: the element indices go through pinned() (the tiles with kConstantStaging). Common: a
// thread's elements share their coordinate along the fastest dimension visibly (element()).
template <int D, int K, bool Pin = false, bool Common = false>
struct Part {
  static constexpr int kScalar = ceil_div_int(D * K, kThreads);    // elements per thread
  static constexpr int kChunks = D * K / kVec;                     // 16-byte pieces per slice
  static constexpr int kVector = ceil_div_int(kChunks, kThreads);  // pieces per thread
  static constexpr int kRegs = kScalar > kVector* kVec ? kScalar : kVector* kVec;
  float v[kRegs] ECH_SIM_ZEROED;  // stage() reads only what fetch() set

  __device__ static __forceinline__ int index(int x) { return Pin ? pinned(x) : x; }

  // Piece c: (d, k) of its first element; the 4 run along k (k_fast) or along d.
  __device__ static __forceinline__ void piece(int c, bool k_fast, int& d, int& k) {
    d = k_fast ? c / (K / kVec) : c % (D / kVec) * kVec;
    k = k_fast ? c % (K / kVec) * kVec : c / (D / kVec);
  }

  // Element j of a thread: (d, k) of element idx = threadIdx.x + j * kThreads of the slice in
  // its [k][d] (k_fast: [d][k]) order. Pinned, idx is index(threadIdx.x + j * kThreads), or in
  // Common parts first + j * kThreads with first = index(threadIdx.x): where kThreads is a
  // multiple of the fastest dimension, the thread's coordinate along it is then the same for
  // every j, written so, from one pinned index, so that the loader's decoding of it (the weight
  // gradient's split of k into image and position, grad input's split of a weight's k) is
  // visibly common to the thread's elements and computed once; pinning each element's index
  // hides that. Common only in mma_tile.cuh's 128x128 tiles (5-16% fewer instructions issued a
  // k-slice, 3-14 registers fewer, session 40): the warp-tiled FMA tiles lost registers with one
  // pinned index (the SGEMM spilled 188 bytes, the conv grad input went from 127 to 149 registers).
  __device__ static __forceinline__ int element_index(int first, int j) {
    return Common ? first + j * kThreads : index(threadIdx.x + j * kThreads);
  }
  template <bool kShared = Common>
  __device__ static __forceinline__ void element(int idx, int first, int j, bool k_fast, int& d,
                                                 int& k) {
    if (kShared && k_fast && kThreads % K == 0) {
      d = first / K + j * (kThreads / K), k = first % K;
    } else if (kShared && !k_fast && kThreads % D == 0) {
      d = first % D, k = first / D + j * (kThreads / D);
    } else {
      d = k_fast ? idx / K : idx % D, k = k_fast ? idx % K : idx / D;
    }
  }

  // Registers <- the slice at (d0, k0), for Scalar and Vector operands. A Scalar operand that
  // is not k-fastest reads d = threadIdx.x % D in every slice when kThreads % D == 0: the
  // conv's gather table (conv_gemm.cu) decodes that column once per thread and relies on it.
  template <typename Get, typename Span>
  __device__ __forceinline__ void fetch(Load load, bool k_fast, Get get, Span span, int64_t d0,
                                        int64_t k0) {
    if (load == Load::Scalar) {
      const int first = Common ? index(threadIdx.x) : 0;
#pragma unroll
      for (int j = 0; j < kScalar; ++j) {
        const int idx = element_index(first, j);
        if (D * K % kThreads == 0 || idx < D * K) {
          int d, k;
          element(idx, first, j, k_fast, d, k);
          v[j] = get(d0 + d, k0 + k);
        }
      }
    } else if (load == Load::Vector) {
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        const int c = index(threadIdx.x + j * kThreads);
        if (kChunks % kThreads != 0 && c >= kChunks) continue;
        int d, k;
        piece(c, k_fast, d, k);
        const float* p;
        const int n = span(d0 + d, k0 + k, p);
        if (n == kVec) {
          const float4 q = *reinterpret_cast<const float4*>(p);
          v[j * kVec] = q.x, v[j * kVec + 1] = q.y, v[j * kVec + 2] = q.z, v[j * kVec + 3] = q.w;
        } else {
#pragma unroll
          for (int i = 0; i < kVec; ++i) v[j * kVec + i] = i < n ? p[i] : 0.0f;
        }
      }
    }
  }

  // tile[k][d] <- the registers (Scalar and Vector operands); Tf32: rounded (tf32_when_staged).
  template <bool Tf32, typename E, int W>
  __device__ __forceinline__ void stage(Load load, bool k_fast, E (&tile)[K][W]) const {
    if (load == Load::Scalar) {
      // One address a thread, the elements at constant offsets, where the fastest dimension
      // allows (element()): fewer registers and instructions in every fp32 / TF32 tile and the
      // 128x128 bf16 one (session 41); the small bf16 tiles keep the per-element indices (the
      // 16x256 one's weight gradient spilled with one address).
      const int first = threadIdx.x;
#pragma unroll
      for (int j = 0; j < kScalar; ++j) {
        const int idx = threadIdx.x + j * kThreads;
        if (D * K % kThreads == 0 || idx < D * K) {
          int d, k;
          element<Common || std::is_same_v<E, float>>(idx, first, j, k_fast, d, k);
          tile[k][d] = to_tile<E, Tf32>(v[j]);
        }
      }
    } else if (load == Load::Vector) {
#pragma unroll
      for (int j = 0; j < kVector; ++j) {
        const int c = threadIdx.x + j * kThreads;
        if (kChunks % kThreads != 0 && c >= kChunks) continue;
        int d, k;
        piece(c, k_fast, d, k);
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          tile[k + (k_fast ? i : 0)][d + (k_fast ? 0 : i)] = to_tile<E, Tf32>(v[j * kVec + i]);
      }
    }
  }

  // cp.async of the slice at (d0, k0) into tile[k][d] (an Async operand: d contiguous).
  template <int W, typename Span>
  __device__ static __forceinline__ void issue(float (&tile)[K][W], Span span, int64_t d0,
                                               int64_t k0) {
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      const int c = index(threadIdx.x + j * kThreads);
      if (kChunks % kThreads != 0 && c >= kChunks) continue;
      int d, k;
      piece(c, false, d, k);
      const float* p;
      const int n = span(d0 + d, k0 + k, p);
      cp_async<kVec * sizeof(float)>(&tile[k][d], p, n * sizeof(float));
    }
  }

  // cp.async of the slice at (d0, k0) into tile[k][d], one 4-byte copy an element, in fetch()'s
  // Scalar order (an AsyncGather operand); at(d, k, p) as the loader's a_at / b_at. Zero-filled
  // where the element is outside (padding, the K tail, the matrix edge): p then is any aligned
  // address of the operand, which the copy does not read.
  template <int W, typename At>
  __device__ static __forceinline__ void issue_gather(float (&tile)[K][W], bool k_fast, At at,
                                                      int64_t d0, int64_t k0) {
    const int first = Common ? index(threadIdx.x) : 0;
#pragma unroll
    for (int j = 0; j < kScalar; ++j) {
      const int idx = element_index(first, j);
      if (D * K % kThreads != 0 && idx >= D * K) continue;
      int d, k;
      element(idx, first, j, k_fast, d, k);
      const float* p;
      const bool inside = at(d0 + d, k0 + k, p);
      cp_async<sizeof(float)>(&tile[k][d], p, inside ? sizeof(float) : 0);
    }
  }

  // cp.async of the slice at (d0, k0) into rows[d][k] (an AsyncK operand: k contiguous; the 4
  // threads of a row read its 64 bytes). Zero-filled as issue()'s: the K tail and the edge.
  template <typename Span>
  __device__ static __forceinline__ void issue_k(float (&rows)[D][K + kVec], Span span, int64_t d0,
                                                 int64_t k0) {
#pragma unroll
    for (int j = 0; j < kVector; ++j) {
      const int c = index(threadIdx.x + j * kThreads);
      if (kChunks % kThreads != 0 && c >= kChunks) continue;
      int d, k;
      piece(c, true, d, k);
      const float* p;
      const int n = span(d0 + d, k0 + k, p);
      cp_async<kVec * sizeof(float)>(&rows[d][k], p, n * sizeof(float));
    }
  }
};

// A thread's share of one k-slice of op(A) rows m0.. and op(B) columns n0..: the registers of the
// Scalar / Vector operands between their global loads (fetch) and shared stores (stage), and
// the cp.async issue of the Async ones.
template <typename T>
struct Slice {
  static constexpr bool kCommon = T::kConstantStaging && !T::kWarpTiled;  // MmaLargeTile
  using APart = Part<T::kM, T::kK, T::kConstantStaging, kCommon>;
  using BPart = Part<T::kN, T::kK, T::kConstantStaging, kCommon>;
  APart a;
  BPart b;

  template <typename Operands>
  __device__ __forceinline__ void fetch(const Staging& st, const Operands& ops, int64_t m0,
                                        int64_t n0, int64_t k0) {
    a.fetch(
        st.a, st.a_k, [&](int64_t m, int64_t k) { return ops.a(m, k); },
        [&](int64_t m, int64_t k, const float*& p) { return ops.a_span(m, k, p); }, m0, k0);
    b.fetch(
        st.b, st.b_k, [&](int64_t n, int64_t k) { return ops.b(k, n); },
        [&](int64_t n, int64_t k, const float*& p) { return ops.b_span(k, n, p); }, n0, k0);
  }

  __device__ __forceinline__ void stage(const Staging& st, ATile<T>& a_tile,
                                        BTile<T>& b_tile) const {
    a.template stage<tf32_when_staged<T>()>(st.a, st.a_k, a_tile);
    b.template stage<tf32_when_staged<T>()>(st.b, st.b_k, b_tile);
  }

  template <typename Operands>
  __device__ static __forceinline__ void issue(const Staging& st, const Operands& ops, int64_t m0,
                                               int64_t n0, int64_t k0, ATile<T>& a_tile,
                                               BTile<T>& b_tile) {
    if constexpr (async_k<T>()) {
      if (st.a == Load::AsyncK)
        APart::issue_k(
            k_rows<T::kM>(a_tile),
            [&](int64_t m, int64_t k, const float*& p) { return ops.a_span(m, k, p); }, m0, k0);
      if (st.b == Load::AsyncK)
        BPart::issue_k(
            k_rows<T::kN>(b_tile),
            [&](int64_t n, int64_t k, const float*& p) { return ops.b_span(k, n, p); }, n0, k0);
    }
    if constexpr (async_gather<T>()) {
      if (st.a == Load::AsyncGather)
        APart::issue_gather(
            a_tile, st.a_k,
            [&](int64_t m, int64_t k, const float*& p) { return ops.a_at(m, k, p); }, m0, k0);
      if (st.b == Load::AsyncGather)
        BPart::issue_gather(
            b_tile, st.b_k,
            [&](int64_t n, int64_t k, const float*& p) { return ops.b_at(k, n, p); }, n0, k0);
    }
    if constexpr (T::kFloat) {
      if (st.a == Load::Async)
        APart::issue(
            a_tile, [&](int64_t m, int64_t k, const float*& p) { return ops.a_span(m, k, p); }, m0,
            k0);
      if (st.b == Load::Async)
        BPart::issue(
            b_tile, [&](int64_t n, int64_t k, const float*& p) { return ops.b_span(k, n, p); }, n0,
            k0);
    }
  }
};

// Stages `slices` k-slices in the ring and calls multiply(stage) (or multiply(stage, staging),
// where it takes one: the async-K tiles read AsyncK stages as [d][k]) once slice s sits in that
// stage. locate(s, f) calls f(operand loader, k0) for slice s (its loader: the SGEMM's batch).
// Register operands: while the block multiplies slice s, each thread's registers hold slice
// s + 1 (its global loads in flight), stored into the next stage afterwards. Async operands:
// slice s + kStages - 1's copies are issued into the stage slice s - 1 used, before the FMAs.
template <typename T, typename Locate, typename Multiply>
__device__ __forceinline__ void run_slices(int64_t slices, const Staging& st, int64_t m0,
                                           int64_t n0, ATiles<T>& a_tile, BTiles<T>& b_tile,
                                           Locate locate, Multiply multiply) {
  constexpr int kStages = T::kStages;
  const bool async = st.any_async();
  const auto issue = [&](int64_t s, int stage) {  // one cp.async group per slice, even if empty
    if (s < slices)
      locate(s, [&](const auto& ops, int64_t k0) {
        Slice<T>::issue(st, ops, m0, n0, k0, a_tile[stage], b_tile[stage]);
      });
    __pipeline_commit();
  };
  Slice<T> next;
  if (async)
    for (int s = 0; s < kStages - 1; ++s) issue(s, s);
  if (slices > 0) {
    locate(int64_t{0}, [&](const auto& ops, int64_t k0) { next.fetch(st, ops, m0, n0, k0); });
    next.stage(st, a_tile[0], b_tile[0]);
  }
  int cur = 0;
  for (int64_t s = 0; s < slices; ++s) {
    if (async) __pipeline_wait_prior(kStages - 2);  // this thread's copies of slice s landed
    __syncthreads();  // everyone's slice s is in stage cur; nobody reads slice s - 1's stage
    const int following = cur + 1 == kStages ? 0 : cur + 1;
    if (async) issue(s + kStages - 1, cur == 0 ? kStages - 1 : cur - 1);
    if (s + 1 < slices)
      locate(s + 1, [&](const auto& ops, int64_t k0) { next.fetch(st, ops, m0, n0, k0); });
    if constexpr (std::is_invocable_v<Multiply&, int, const Staging&>)
      multiply(cur, st);
    else
      multiply(cur);
    if (s + 1 < slices) next.stage(st, a_tile[following], b_tile[following]);
    cur = following;
  }
}

// Calls f(c) with c equal to st but with literal loads and k_fastest flags, one call site per
// combination (4 x 4), so that once inlined each gets its own copy of the staging loop,
// register-allocated alone: the 128x128 warp-tiled tile fits 128 registers only so (one loop
// for every staging needs the registers of all at once). An operand's 4 stagings (staging_of):
// element-wise (Scalar, or AsyncGather in the gather tiles) k- or d-fastest; float tiles: Vector
// or, in the async-K tiles, AsyncK (k-fastest) and Async (d-fastest); bf16 tiles (no cp.async):
// Vector k- or d-fastest.
template <typename T, typename F>
__device__ __forceinline__ void with_constant_staging(const Staging& st, F f) {
  constexpr Load kVectorD = T::kFloat ? Load::Async : Load::Vector;  // a vector operand, d-fastest
  constexpr Load kVectorK = async_k<T>() ? Load::AsyncK : Load::Vector;  // and k-fastest
  constexpr Load kElement = async_gather<T>() ? Load::AsyncGather : Load::Scalar;
  const auto with_b = [&](Load a, bool a_k) {
    if (st.b == kElement && st.b_k)
      f(Staging{a, kElement, a_k, true});
    else if (st.b == kElement)
      f(Staging{a, kElement, a_k, false});
    else if (T::kFloat ? st.b == kVectorK : st.b_k)
      f(Staging{a, kVectorK, a_k, true});
    else
      f(Staging{a, kVectorD, a_k, false});
  };
  if (st.a == kElement && st.a_k)
    with_b(kElement, true);
  else if (st.a == kElement)
    with_b(kElement, false);
  else if (T::kFloat ? st.a == kVectorK : st.a_k)
    with_b(kVectorK, true);
  else
    with_b(kVectorD, false);
}

// run_slices; for the tiles with kConstantStaging, specialized per staging (with_constant_staging).
template <typename T, typename Locate, typename Multiply>
__device__ __forceinline__ void for_each_slice(int64_t slices, const Staging& st, int64_t m0,
                                               int64_t n0, ATiles<T>& a_tile, BTiles<T>& b_tile,
                                               Locate locate, Multiply multiply) {
  if constexpr (T::kConstantStaging)
    with_constant_staging<T>(st, [&](const Staging& c) {
      run_slices<T>(slices, c, m0, n0, a_tile, b_tile, locate, multiply);
    });
  else
    run_slices<T>(slices, st, m0, n0, a_tile, b_tile, locate, multiply);
}

}  // namespace echelon::cuda::tile
