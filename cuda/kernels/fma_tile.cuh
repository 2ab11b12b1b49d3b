// The FMA cores of the block tiles (cuda/kernels/gemm_tile.cuh): the block-strided one
// (multiply_slice, store_fma_tile; gemm_tile.cuh's top describes its layout) and the warp-tiled
// one (FmaWarps), the layout of the best public SGEMMs (CUTLASS's SIMT path; the warp-tiled kernel
// of Simon Boehm's "How to optimize a CUDA matmul kernel"): each warp owns a contiguous kWarpM x
// kWarpN piece of the block's C tile, its lanes a 4 x 8 grid in it (kLanesM x kLanesN), and each
// thread its ThM x ThN outputs as groups of 4 rows and 4 columns, kLanesM * 4 rows and kLanesN * 4
// columns apart. A warp's 16-byte fragment reads of a k row of the shared tiles then touch 4 (A)
// and 8 (B) distinct vectors, at most 128 consecutive bytes, the rest broadcasts: one shared-memory
// wavefront each (the block-strided layout of multiply_slice read 16 distinct B vectors a warp, 256
// bytes: two). The fragments of k + 1 are loaded while k's FMAs run (register double buffering).
// The 128x128 tile (8x8 per thread): 4 x 2 warps of 32x64. Each output is still one thread's
// fmaf chain over k in order: bit for bit the sums of the block-strided core (multiply_slice),
// which ECHELON_FMA_CORE=old keeps (cuda::set_fma_warp_tiles). CPU twin: tensor/cpu/matmul.cpp
// (and tensor/cpu/conv.cpp for the convolution that uses this core).
#pragma once

#include <cstdint>

#include "gemm_tile.cuh"

namespace echelon::cuda::tile {

// ---- the block-strided core (multiply_slice, store_fma_tile) ---------------------------------

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

// ---- the warp-tiled core (FmaWarps) --------------------------------------------------------

template <typename T>
struct FmaWarps {
  static constexpr int kLanesM = 4, kLanesN = 32 / kLanesM;
  static constexpr int kWarpM = kLanesM * T::kThM, kWarpN = kLanesN * T::kThN;
  static constexpr int kWarpsM = T::kM / kWarpM;  // warps along m
  static constexpr int kGroupsM = T::kThM / kVec, kGroupsN = T::kThN / kVec;
  static_assert(T::kFloat && T::kM % kWarpM == 0 && T::kN % kWarpN == 0 &&
                kWarpsM * (T::kN / kWarpN) == kThreads / 32);

  int row, col;  // the thread's first output in the block tile
  float acc[T::kThM][T::kThN];

  __device__ FmaWarps() {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    row = warp % kWarpsM * kWarpM + lane % kLanesM * kVec;
    col = warp / kWarpsM * kWarpN + lane / kLanesM * kVec;
#pragma unroll
    for (int i = 0; i < T::kThM; ++i)
#pragma unroll
      for (int j = 0; j < T::kThN; ++j) acc[i][j] = 0.0f;
  }

  // Row i / column j of the thread's outputs, relative to the block tile.
  __device__ __forceinline__ int row_of(int i) const {
    return row + i / kVec * kLanesM * kVec + i % kVec;
  }
  __device__ __forceinline__ int col_of(int j) const {
    return col + j / kVec * kLanesN * kVec + j % kVec;
  }

  // acc += the products of one staged k-slice.
  __device__ __forceinline__ void multiply(const float (*a_tile)[T::kM + T::kPad],
                                           const float (*b_tile)[T::kN + T::kPad]) {
    float a[2][T::kThM], b[2][T::kThN];
    load(a_tile[0], b_tile[0], a[0], b[0]);
#pragma unroll
    for (int k = 0; k < T::kK; ++k) {
      if (k + 1 < T::kK) load(a_tile[k + 1], b_tile[k + 1], a[(k + 1) % 2], b[(k + 1) % 2]);
#pragma unroll
      for (int i = 0; i < T::kThM; ++i)
#pragma unroll
        for (int j = 0; j < T::kThN; ++j) acc[i][j] = fmaf(a[k % 2][i], b[k % 2][j], acc[i][j]);
    }
  }

  // Calls store(m, n, value) for each of the thread's outputs (m, n of the whole C; the store
  // checks the bounds), column by column: what the store derives from n (the conv's split of it,
  // ConvOperands::store) is then live for one column's 8 stores. Row by row, ptxas, at this
  // tile's 128-register cap, recomputed the 8 columns' splits at every store (session 43).
  template <typename Store>
  __device__ __forceinline__ void store_tile(int64_t m0, int64_t n0, Store store) const {
#pragma unroll
    for (int j = 0; j < T::kThN; ++j)
#pragma unroll
      for (int i = 0; i < T::kThM; ++i) store(m0 + row_of(i), n0 + col_of(j), acc[i][j]);
  }

 private:
  // The thread's fragments of one k row of the shared tiles.
  __device__ __forceinline__ void load(const float* a_row, const float* b_row, float (&a)[T::kThM],
                                       float (&b)[T::kThN]) const {
#pragma unroll
    for (int g = 0; g < kGroupsM; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(a_row + row + g * kLanesM * kVec);
      a[g * kVec] = v.x, a[g * kVec + 1] = v.y, a[g * kVec + 2] = v.z, a[g * kVec + 3] = v.w;
    }
#pragma unroll
    for (int g = 0; g < kGroupsN; ++g) {
      const float4 v = *reinterpret_cast<const float4*>(b_row + col + g * kLanesN * kVec);
      b[g * kVec] = v.x, b[g * kVec + 1] = v.y, b[g * kVec + 2] = v.z, b[g * kVec + 3] = v.w;
    }
  }
};

}  // namespace echelon::cuda::tile
