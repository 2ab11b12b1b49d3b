// Internal to conv_winograd_weight.cpp (F(2x2, 3x3)) and conv_winograd43_weight.cpp (F(4x4,
// 3x3)): the sum of the chunks' partial gradients, and the AVX-512 register tiles of the Winograd
// weight gradient's GEMMs and the layouts of their V and Z (x86 only; run only where the CPU has
// AVX-512).
#pragma once

#include <cstdint>

#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>
#include <echelon/tensor/cpu/fast/parallel.h>

namespace echelon::cpu::fast::winograd {

// partials: (chunks, n), each chunk's dU. Adds every chunk into the first, each element in chunk
// order: the same bits on any split of the elements across threads.
inline void sum_chunk_partials(float* partials, int64_t n, int64_t chunks) {
  parallel_for(n, int64_t{1} << 13, [&](int64_t begin, int64_t end) {
    for (int64_t c = 1; c < chunks; ++c) {
      const float* part = partials + c * n;
      for (int64_t i = begin; i < end; ++i) partials[i] += part[i];
    }
  });
}

}  // namespace echelon::cpu::fast::winograd

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace echelon::cpu::fast::winograd {

// Tiles per block: a vector of 16 (F(2x2): the forward's AVX-512 pass of two 8-tile vectors).
constexpr int64_t kBlockTiles = 16;

// Floats between V's channels: a block's Xi x 16 and a cache line more (F(2x2): 1088 bytes, not
// 1024, which would put the channels in the same L1 sets).
constexpr int64_t channel_stride(int64_t xi) {
  return xi * kBlockTiles + kBlockTiles;
}

// Floats between Z's tiles: a cache line more than the tile's xi x op, so that one position's
// lines over the tiles fall in different L1 sets (at 16 x 64 floats, 4 KiB apart, they all
// shared 4 sets and Z came from L2 on every GEMM).
inline int64_t z_tile(int64_t xi, int64_t op) {
  return xi * op + kBlockTiles;
}

using WeightTileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*);

// dU[xi][c][o] += V * Z over a pass's tiles with AVX-512 (`Xi` transformed positions per tile:
// 16 for F(2x2, 3x3), 36 for F(4x4, 3x3)): B input channels x NO vectors of 16 output channels
// in registers, acc[j][k] += V of channel c0 + j at tile t (a broadcast) * Z at t, tile by tile,
// one FMA chain per entry in tile order. v and z point at the pass's position xi: V of block q,
// channel c at q * v_stride + c * channel_stride(Xi) ([xi][16 tiles]), Z of its tile t at
// (16 q + t) * z_tile(Xi, op) ([xi][o]). The broadcasts' addresses are constant offsets from v
// (the channel stride a constant): with a run-time stride GCC chained one add per broadcast, a
// serial dependency that held the 8-channel tiles to half the FMA rate.
template <int B, int NO, int64_t Xi>
ECH_WINOGRAD_AVX512 void weight_tile_512(const float* v, int64_t v_stride, const float* z,
                                         int64_t count, int64_t op, float* acc_at) {
  __m512 acc[B][NO];
#pragma GCC unroll 12
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 4
    for (int k = 0; k < NO; ++k) acc[j][k] = _mm512_loadu_ps(acc_at + j * op + k * int64_t{16});
  for (int64_t p = 0; p < count; ++p, v += v_stride) {
#pragma GCC unroll 16
    for (int t = 0; t < kBlockTiles; ++t, z += z_tile(Xi, op)) {
      __m512 zv[NO];
#pragma GCC unroll 4
      for (int k = 0; k < NO; ++k) zv[k] = _mm512_loadu_ps(z + k * int64_t{16});
#pragma GCC unroll 12
      for (int j = 0; j < B; ++j) {
        const __m512 vj = _mm512_set1_ps(v[j * channel_stride(Xi) + t]);
#pragma GCC unroll 4
        for (int k = 0; k < NO; ++k) acc[j][k] = _mm512_fmadd_ps(vj, zv[k], acc[j][k]);
      }
    }
  }
#pragma GCC unroll 12
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 4
    for (int k = 0; k < NO; ++k) _mm512_storeu_ps(acc_at + j * op + k * int64_t{16}, acc[j][k]);
}

// Input channels per AVX-512 weight tile: 12 x 1 or 6 x 2 (or x 4) accumulators.
inline int64_t weight_block_512(int64_t vectors) {
  return vectors == 1 ? 12 : 6;
}

template <int NO, int64_t Xi>
WeightTileFn weight_tile_512_for(int64_t block) {
  if constexpr (NO == 1) {
    switch (block) {
      case 12:
        return weight_tile_512<12, 1, Xi>;
      case 11:
        return weight_tile_512<11, 1, Xi>;
      case 10:
        return weight_tile_512<10, 1, Xi>;
      case 9:
        return weight_tile_512<9, 1, Xi>;
      case 8:
        return weight_tile_512<8, 1, Xi>;
      case 7:
        return weight_tile_512<7, 1, Xi>;
      default:
        break;
    }
  }
  switch (block) {
    case 6:
      return weight_tile_512<6, NO, Xi>;
    case 5:
      return weight_tile_512<5, NO, Xi>;
    case 4:
      return weight_tile_512<4, NO, Xi>;
    case 3:
      return weight_tile_512<3, NO, Xi>;
    case 2:
      return weight_tile_512<2, NO, Xi>;
    default:
      return weight_tile_512<1, NO, Xi>;
  }
}

}  // namespace echelon::cpu::fast::winograd

#endif
