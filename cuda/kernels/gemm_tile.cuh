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
// Each 256-thread block computes a TM x TN tile of C, walking K in k-slices of 8. The block
// stages an (8 x TM) slice of op(A) and an (8 x TN) slice of op(B) in shared memory (k-major, so
// a thread reads its rows / columns as 16-byte vectors), and each thread keeps a ThM x ThN
// sub-tile of C in registers. A thread's columns are groups of 4, TN / (ThN / 4) apart (not
// adjacent): a quarter-warp's 16-byte loads then cover 32 consecutive floats, one per bank
// (adjacent columns per thread made lanes 0 and 4 collide: a 2-way bank conflict). Rows
// likewise. Double-buffered: the global loads of the next k-slice are issued into registers
// before the current slice's FMAs and stored to the other shared buffer after them (one barrier
// per slice). Shared rows are padded by 4 floats to spread the transposed stores over the banks.
// TF32 (Tf32Warps): the same staging on tensor cores; the 8 warps each own a 16 x (TN * 16 / TM)
// piece of C as 16x16x8 WMMA accumulators, fragments loaded straight from the k-major shared
// tiles (A's as column-major, B's as row-major) and rounded to TF32 (round to nearest, ties away,
// as the CPU twin cpu::gemm_tf32 does; the tensor cores would otherwise truncate).
#pragma once

#include <cstdint>

#include <mma.h>

namespace echelon::cuda::tile {

constexpr int kTileK = 8, kPad = 4, kVec = 4, kThreads = 256;

// Blocks a launch should have before a larger tile or fewer split-K groups are worth it (the
// launchers of matmul.cu and conv_gemm.cu). The emulation build uses a few, so that test-sized
// problems reach every tile and split.
#if ECHELON_CUDA_SIM
constexpr int64_t kFillBlocks = 4;
#else
constexpr int64_t kFillBlocks = 2 * 132;  // two blocks per SM of an H200; to tune on the GPU
#endif

template <int TM, int TN, int ThM, int ThN>
struct Tile {
  static constexpr int kM = TM, kN = TN, kThM = ThM, kThN = ThN;
  static constexpr int kRows = TM / ThM, kCols = TN / ThN;  // threads along m and n
  static constexpr int kLoadsA = TM * kTileK / kThreads;    // elements of A per thread and slice
  static constexpr int kLoadsB = TN * kTileK / kThreads;    // elements of B per thread and slice
  static_assert(kRows * kCols == kThreads && ThM % kVec == 0 && ThN % kVec == 0);
  static_assert(TM * kTileK % kThreads == 0 && TN * kTileK % kThreads == 0);
};
using LargeTile = Tile<128, 128, 8, 8>;
using SmallTile = Tile<64, 64, 4, 4>;
// Few rows, many columns: conv GEMMs whose M is a small channel count (6..32 in the zoo) waste
// half or more of a 64-row tile; 32 rows waste at most 26 of 32 (6 channels) and keep 16 outputs
// per thread.
using NarrowTile = Tile<32, 128, 4, 4>;

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
      a[j] =
          ops.a(m0 + (a_k ? idx / kTileK : idx % T::kM), k0 + (a_k ? idx % kTileK : idx / T::kM));
    }
#pragma unroll
    for (int j = 0; j < T::kLoadsB; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      b[j] =
          ops.b(k0 + (b_k ? idx % kTileK : idx / T::kN), n0 + (b_k ? idx / kTileK : idx % T::kN));
    }
  }

  __device__ __forceinline__ void stage(bool a_k, bool b_k, float (*a_tile)[T::kM + kPad],
                                        float (*b_tile)[T::kN + kPad]) const {
#pragma unroll
    for (int j = 0; j < T::kLoadsA; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      a_tile[a_k ? idx % kTileK : idx / T::kM][a_k ? idx / kTileK : idx % T::kM] = a[j];
    }
#pragma unroll
    for (int j = 0; j < T::kLoadsB; ++j) {
      const int idx = threadIdx.x + j * kThreads;
      b_tile[b_k ? idx % kTileK : idx / T::kN][b_k ? idx / kTileK : idx % T::kN] = b[j];
    }
  }
};

// acc += the (ThM x ThN) products of one staged k-slice.
template <typename T>
__device__ __forceinline__ void multiply_slice(const float (*a_tile)[T::kM + kPad],
                                               const float (*b_tile)[T::kN + kPad], int thread_row,
                                               int thread_col, float (&acc)[T::kThM][T::kThN]) {
#pragma unroll
  for (int k = 0; k < kTileK; ++k) {
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
                                               float (*a_tile)[kTileK][T::kM + kPad],
                                               float (*b_tile)[kTileK][T::kN + kPad], Fetch fetch,
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

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // TF32 tensor cores need sm_80 or newer

namespace wmma = nvcuda::wmma;
constexpr int kFrag = 16, kFragK = 8, kWarps = kThreads / 32;  // WMMA m16n16k8 for TF32
static_assert(kFragK == kTileK, "one MMA per k-slice");

// The TF32 block tile: warps tile C as kWarpsM x (kWarps / kWarpsM), each a 16 x kWarpN piece.
// Shared tiles must be 32-byte aligned (every fragment pointer then is).
template <typename T>
struct Tf32Warps {
  static constexpr int kWarpsM = T::kM / kFrag, kWarpN = T::kN / (kWarps / kWarpsM);
  static constexpr int kFragsN = kWarpN / kFrag;
  static_assert(kWarps % kWarpsM == 0 && kWarpN % kFrag == 0);

  int warp_m, warp_n, lane;
  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFragK, float> acc[kFragsN];

  __device__ Tf32Warps() {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    lane = static_cast<int>(threadIdx.x) % 32;
    warp_m = warp % kWarpsM, warp_n = warp / kWarpsM;
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) wmma::fill_fragment(acc[f], 0.0f);
  }

  // acc += the products of one staged k-slice (a warp collective).
  __device__ __forceinline__ void multiply(const float (*a_tile)[T::kM + kPad],
                                           const float (*b_tile)[T::kN + kPad]) {
    wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFragK, wmma::precision::tf32, wmma::col_major> a;
    wmma::load_matrix_sync(a, &a_tile[0][warp_m * kFrag], T::kM + kPad);
#pragma unroll
    for (int i = 0; i < a.num_elements; ++i) a.x[i] = wmma::__float_to_tf32(a.x[i]);
#pragma unroll
    for (int f = 0; f < kFragsN; ++f) {
      wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFragK, wmma::precision::tf32, wmma::row_major>
          b;
      wmma::load_matrix_sync(b, &b_tile[0][warp_n * kWarpN + f * kFrag], T::kN + kPad);
#pragma unroll
      for (int i = 0; i < b.num_elements; ++i) b.x[i] = wmma::__float_to_tf32(b.x[i]);
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
