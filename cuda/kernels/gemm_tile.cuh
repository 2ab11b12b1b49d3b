// The block-tile machinery our GEMM kernels share: the dense SGEMM (cuda/kernels/matmul.cu) and
// the implicit-GEMM convolution (cuda/kernels/conv_gemm.cu). What differs between them is only
// where an element of op(A) or op(B) comes from and where an element of C goes, so both hand
// the staging loop an *operand loader*: an object with
//   float a(int64_t m, int64_t k) const   op(A)(m, k), zero outside the matrix
//   float b(int64_t k, int64_t n) const   op(B)(k, n), zero outside the matrix
//   bool a_k_fastest() const              A's storage has k contiguous (else m)
//   bool b_k_fastest() const              B's storage has k contiguous (else n)
// The last two order the global loads so that neighbouring threads read neighbouring addresses.
//
// Each 256-thread block computes a TM x TN tile of C, walking K in k-slices of kK (8; 16 for
// bf16). The block stages a (kK x TM) slice of op(A) and a (kK x TN) slice of op(B) in shared
// memory (k-major, so
// a thread reads its rows / columns as 16-byte vectors), and each thread keeps a ThM x ThN
// sub-tile of C in registers. A thread's columns are groups of 4, TN / (ThN / 4) apart (not
// adjacent): a quarter-warp's 16-byte loads then cover 32 consecutive floats, one per bank
// (adjacent columns per thread made lanes 0 and 4 collide: a 2-way bank conflict). Rows
// likewise. Double-buffered: the global loads of the next k-slice are issued into registers
// before the current slice's FMAs and stored to the other shared buffer after them (one barrier
// per slice). Shared rows are padded by 16 bytes to spread the transposed stores over the banks.
// Tensor cores (MmaWarps): the same staging; the 8 warps each own a 16 x (TN * 16 / TM) piece of
// C as WMMA accumulators, fragments loaded straight from the k-major shared tiles (A's as
// column-major, B's as row-major). The tile's element type picks the precision:
//   float: TF32, 16x16x8 fragments, rounded to TF32 after the load (round to nearest, ties away,
//          as the CPU twin cpu::gemm_tf32 does; the tensor cores would otherwise truncate);
//   __nv_bfloat16: bf16, 16x16x16 fragments, k-slices of 16; the shared tiles hold bf16, rounded
//          to nearest even when staged (__float2bfloat16_rn, as cpu::gemm_bf16 does), which also
//          halves their footprint. Global memory, accumulators and outputs stay fp32.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <mma.h>

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

// E: what the shared tiles hold (float for FMA and TF32, __nv_bfloat16 for bf16).
template <int TM, int TN, int ThM, int ThN, typename E = float>
struct Tile {
  using Elem = E;
  static constexpr int kM = TM, kN = TN, kThM = ThM, kThN = ThN;
  static constexpr int kK = std::is_same_v<E, float> ? 8 : 16;   // k-slice depth: one MMA's k
  static constexpr int kPad = 16 / static_cast<int>(sizeof(E));  // 16 bytes a shared row
  static constexpr int kRows = TM / ThM, kCols = TN / ThN;       // threads along m and n
  static constexpr int kLoadsA = TM * kK / kThreads;  // elements of A per thread and slice
  static constexpr int kLoadsB = TN * kK / kThreads;  // elements of B per thread and slice
  static_assert(kRows * kCols == kThreads && ThM % kVec == 0 && ThN % kVec == 0);
  static_assert(TM * kK % kThreads == 0 && TN * kK % kThreads == 0);
};
using LargeTile = Tile<128, 128, 8, 8>;
using SmallTile = Tile<64, 64, 4, 4>;
// Few rows, many columns: conv GEMMs whose M is a small channel count (6..32 in the zoo) waste
// half or more of a 64-row tile; 32 rows waste at most 26 of 32 (6 channels) and keep 16 outputs
// per thread.
using NarrowTile = Tile<32, 128, 4, 4>;
// The bf16 tensor-core tiles (MmaWarps only; ThM, ThN unused there).
using Bf16SmallTile = Tile<64, 64, 4, 4, __nv_bfloat16>;
using Bf16NarrowTile = Tile<32, 128, 4, 4, __nv_bfloat16>;

// Shared-memory tiles, double-buffered: [buffer][k][m] of op(A), [buffer][k][n] of op(B).
template <typename T>
using ATiles = typename T::Elem[2][T::kK][T::kM + T::kPad];
template <typename T>
using BTiles = typename T::Elem[2][T::kK][T::kN + T::kPad];
template <typename T>
using ATile = typename T::Elem[T::kK][T::kM + T::kPad];  // one buffer
template <typename T>
using BTile = typename T::Elem[T::kK][T::kN + T::kPad];

// A loaded fp32 value as the shared tiles hold it (bf16: rounded to nearest even).
template <typename E>
__device__ __forceinline__ E to_tile(float v) {
  if constexpr (std::is_same_v<E, float>)
    return v;
  else
    return __float2bfloat16_rn(v);
}

// A thread's share of one k-slice of op(A) rows m0.. and op(B) columns n0.., held in registers
// between the global loads (fetch) and the shared-memory stores (stage).
template <typename T>
struct Slice {
  float a[T::kLoadsA], b[T::kLoadsB];

  template <typename Operands>
  __device__ __forceinline__ void fetch(const Operands& ops, int64_t m0, int64_t n0, int64_t k0) {
    const bool a_k = ops.a_k_fastest(), b_k = ops.b_k_fastest();
#pragma unroll
    for (int j = 0; j < T::kLoadsA; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      a[j] = ops.a(m0 + (a_k ? idx / T::kK : idx % T::kM), k0 + (a_k ? idx % T::kK : idx / T::kM));
    }
#pragma unroll
    for (int j = 0; j < T::kLoadsB; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      b[j] = ops.b(k0 + (b_k ? idx % T::kK : idx / T::kN), n0 + (b_k ? idx / T::kK : idx % T::kN));
    }
  }

  __device__ __forceinline__ void stage(bool a_k, bool b_k, ATile<T>& a_tile,
                                        BTile<T>& b_tile) const {
    using E = typename T::Elem;
#pragma unroll
    for (int j = 0; j < T::kLoadsA; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      a_tile[a_k ? idx % T::kK : idx / T::kM][a_k ? idx / T::kK : idx % T::kM] = to_tile<E>(a[j]);
    }
#pragma unroll
    for (int j = 0; j < T::kLoadsB; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      b_tile[b_k ? idx % T::kK : idx / T::kN][b_k ? idx / T::kK : idx % T::kN] = to_tile<E>(b[j]);
    }
  }
};

// acc += the (ThM x ThN) products of one staged k-slice (float tiles).
template <typename T>
__device__ __forceinline__ void multiply_slice(const float (*a_tile)[T::kM + T::kPad],
                                               const float (*b_tile)[T::kN + T::kPad],
                                               int thread_row, int thread_col,
                                               float (&acc)[T::kThM][T::kThN]) {
#pragma unroll
  for (int k = 0; k < T::kK; ++k) {
    float a_frag[T::kThM], b_frag[T::kThN];
#pragma unroll
    for (int g = 0; g < T::kThM / kVec; ++g) {
      const float4 v =
          *reinterpret_cast<const float4*>(&a_tile[k][g * T::kRows * kVec + thread_row * kVec]);
      a_frag[g * kVec] = v.x, a_frag[g * kVec + 1] = v.y, a_frag[g * kVec + 2] = v.z,
                 a_frag[g * kVec + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < T::kThN / kVec; ++g) {
      const float4 v =
          *reinterpret_cast<const float4*>(&b_tile[k][g * T::kCols * kVec + thread_col * kVec]);
      b_frag[g * kVec] = v.x, b_frag[g * kVec + 1] = v.y, b_frag[g * kVec + 2] = v.z,
                 b_frag[g * kVec + 3] = v.w;
    }
#pragma unroll
    for (int i = 0; i < T::kThM; ++i)
#pragma unroll
      for (int j = 0; j < T::kThN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
  }
}

// Stages `slices` k-slices one by one in two shared buffers and calls multiply(cur) once slice s
// sits in buffer cur: while the block multiplies slice s, each thread's registers hold slice
// s + 1 (its global loads in flight, fetch(s + 1, next)), stored into the other buffer
// afterwards; one barrier per slice. a_k / b_k: the loader's a_k_fastest() / b_k_fastest().
template <typename T, typename Fetch, typename Multiply>
__device__ __forceinline__ void for_each_slice(int64_t slices, bool a_k, bool b_k,
                                               ATiles<T>& a_tile, BTiles<T>& b_tile, Fetch fetch,
                                               Multiply multiply) {
  Slice<T> next;
  if (slices > 0) {
    fetch(int64_t{0}, next);
    next.stage(a_k, b_k, a_tile[0], b_tile[0]);
  }
  __syncthreads();
  for (int64_t s = 0; s < slices; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < slices) fetch(s + 1, next);
    multiply(cur);
    if (s + 1 < slices) next.stage(a_k, b_k, a_tile[cur ^ 1], b_tile[cur ^ 1]);
    __syncthreads();  // slice s + 1 staged; nobody reads buffer cur any more
  }
}

// Calls store(m, n, acc[i][j]) for each of the thread's outputs of the FMA kernel (m, n of the
// whole C; the store checks the bounds).
template <typename T, typename Store>
__device__ __forceinline__ void store_fma_tile(const float (&acc)[T::kThM][T::kThN], int64_t m0,
                                               int64_t n0, int thread_row, int thread_col,
                                               Store store) {
#pragma unroll
  for (int i = 0; i < T::kThM; ++i) {
    const int64_t m = m0 + (i / kVec) * T::kRows * kVec + thread_row * kVec + i % kVec;
#pragma unroll
    for (int j = 0; j < T::kThN; ++j)
      store(m, n0 + (j / kVec) * T::kCols * kVec + thread_col * kVec + j % kVec, acc[i][j]);
  }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // TF32 and bf16 tensor cores: sm_80 or newer

namespace wmma = nvcuda::wmma;
constexpr int kFrag = 16, kWarps = kThreads / 32;

// The tensor-core block tile: warps tile C as kWarpsM x (kWarps / kWarpsM), each a 16 x kWarpN
// piece, one m16n16kK MMA per fragment and k-slice (K = T::kK: 8 for TF32, 16 for bf16). Shared
// tiles must be 32-byte aligned (every fragment pointer then is).
template <typename T>
struct MmaWarps {
  using E = typename T::Elem;
  static constexpr bool kTf32 = std::is_same_v<E, float>;
  using FragPrecision = std::conditional_t<kTf32, wmma::precision::tf32, __nv_bfloat16>;
  static constexpr int kWarpsM = T::kM / kFrag, kWarpN = T::kN / (kWarps / kWarpsM);
  static constexpr int kFragsN = kWarpN / kFrag;
  static_assert(kWarps % kWarpsM == 0 && kWarpN % kFrag == 0);

  int warp_m, warp_n, lane;
  wmma::fragment<wmma::accumulator, kFrag, kFrag, T::kK, float> acc[kFragsN];

  __device__ MmaWarps() {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    lane = static_cast<int>(threadIdx.x) % 32;
    warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) wmma::fill_fragment(acc[f], 0.0f);
  }

  // acc += the products of one staged k-slice (a warp collective).
  __device__ __forceinline__ void multiply(const ATile<T>& a_tile, const BTile<T>& b_tile) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, T::kK, FragPrecision, wmma::col_major> a;
    wmma::load_matrix_sync(a, &a_tile[0][warp_m * kFrag], T::kM + T::kPad);
    if constexpr (kTf32) {
#pragma unroll
      for (int i = 0; i < a.num_elements; ++i) a.x[i] = wmma::__float_to_tf32(a.x[i]);
    }
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, T::kK, FragPrecision, wmma::row_major> b;
      wmma::load_matrix_sync(b, &b_tile[0][warp_n * kWarpN + f * kFrag], T::kN + T::kPad);
      if constexpr (kTf32) {
#pragma unroll
        for (int i = 0; i < b.num_elements; ++i) b.x[i] = wmma::__float_to_tf32(b.x[i]);
      }
      wmma::mma_sync(acc[f], a, b, acc[f]);
    }
  }

  // Calls store(m, n, value) for the warp's outputs, through `out` (this warp's 16x16 scratch,
  // 32-byte aligned), so that bounds checks and epilogues stay per element as in the FMA kernel.
  template <typename Store>
  __device__ __forceinline__ void store_tile(float* out, int64_t m0, int64_t n0, Store store) {
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) {
      wmma::store_matrix_sync(out, acc[f], kFrag, wmma::mem_row_major);
      __syncwarp();  // the lanes read each other's stored elements
      for (int e = lane; e < kFrag * kFrag; e += 32)
        store(m0 + warp_m * kFrag + e / kFrag, n0 + warp_n * kWarpN + f * kFrag + e % kFrag,
              out[e]);
      __syncwarp();  // out is overwritten by the next fragment
    }
  }
};

#endif

}  // namespace echelon::cuda::tile
