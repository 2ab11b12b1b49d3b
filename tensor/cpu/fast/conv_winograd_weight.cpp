// The Winograd F(2x2, 3x3) weight gradient (tensor/cpu/fast/conv_winograd.h): per pass of 1 or
// 4 blocks of 16 tiles (the chunk's tiles image after image), V = B^T d B of the input tiles (the
// forward's input transform) and Z = A dY A^T of grad_out's 2x2 blocks, then dU[xi][c][o] +=
// V * Z over the pass's tiles in register tiles (input channels x output channels in the lanes),
// and at the end dw = G^T dU G. Small passes keep V, Z and dU in L1 from the transforms to the
// GEMMs. Every dU entry sums its tiles in tile order in one FMA chain, whatever the passes (AVX2
// and AVX-512 alike: the same bits). AVX2 or AVX-512 tiles as conv_winograd_isa() says. Where
// conv_winograd_f43_chosen(), F(4x4, 3x3) runs instead (conv_winograd43_weight.cpp).
#include <algorithm>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd.h>
#include <echelon/tensor/cpu/fast/conv_winograd43.h>
#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>
#include <echelon/tensor/cpu/fast/conv_winograd_weight_tiles.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX2 __attribute__((target("avx2,fma")))
#define ECH_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace echelon::cpu::fast {

#ifdef ECH_AVX2
namespace winograd {
namespace {

// The weight gradient: dU[xi][c][o] = sum over tiles t of V[xi][c][t] * Z[t][xi][o], where
// Z = A dY A^T is the 4x4 transform of grad_out's 2x2 block of tile t; then dw = G^T dU G.
// A pass holds `count` blocks of 16 tiles (two vectors, the forward's AVX-512 pass): V of block
// q, channel c at q * v_stride + c * kChannelStride ([xi][16 tiles]), Z of its tile t at
// (16 q + t) * z_tile(op) ([xi][o]).
// acc[j][k] (input channel c0 + j; output channels o0 + 8k .. + 7 in the lanes) += V of (c0 + j)
// at tile t (a broadcast) * Z at t (a vector of 8 channels), tile by tile: v and z point at the
// pass's transformed position xi. The broadcasts' addresses are constant offsets from v (the
// channel stride a constant): with a run-time stride GCC chained one add per broadcast, a serial
// dependency that held the 8-channel tiles to half the FMA rate.
static_assert(kBlockTiles == 2 * kLanes);
constexpr int64_t kChannelStride = channel_stride(kXi);

inline int64_t z_tile(int64_t op) {
  return winograd::z_tile(kXi, op);
}

template <int B, int NO>
ECH_AVX2 void weight_tile(const float* v, int64_t v_stride, const float* z, int64_t count,
                          int64_t op, float* acc_at) {
  __m256 acc[B][NO];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 2
    for (int k = 0; k < NO; ++k) acc[j][k] = _mm256_loadu_ps(acc_at + j * op + k * kLanes);
  for (int64_t p = 0; p < count; ++p, v += v_stride) {
#pragma GCC unroll 16
    for (int t = 0; t < kBlockTiles; ++t, z += z_tile(op)) {
      __m256 zv[NO];
#pragma GCC unroll 2
      for (int k = 0; k < NO; ++k) zv[k] = _mm256_loadu_ps(z + k * kLanes);
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j) {
        const __m256 vj = _mm256_broadcast_ss(v + j * kChannelStride + t);
#pragma GCC unroll 2
        for (int k = 0; k < NO; ++k) acc[j][k] = _mm256_fmadd_ps(vj, zv[k], acc[j][k]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 2
    for (int k = 0; k < NO; ++k) _mm256_storeu_ps(acc_at + j * op + k * kLanes, acc[j][k]);
}

template <int NO>
WeightTileFn weight_tile_for(int64_t block) {
  switch (block) {
    case 6:
      return weight_tile<6, NO>;
    case 5:
      return weight_tile<5, NO>;
    case 4:
      return weight_tile<4, NO>;
    case 3:
      return weight_tile<3, NO>;
    case 2:
      return weight_tile<2, NO>;
    default:
      return weight_tile<1, NO>;
  }
}

// z[t][xi][o] (op floats each, tiles z_tile(op) apart) = A dY A^T for the tiles of `count` vectors
// dY the 2x2 block of grad_out under the tile, from gt (P, op) = grad_out position-major. Lanes
// of a vector without a second quad get Z = 0.
ECH_AVX2 void grad_transform(const float* gt, int64_t op, const TileVector* vectors, int64_t count,
                             int64_t out_w, float* z) {
  for (int64_t i = 0; i < count; ++i) {
    const TileVector& tv = vectors[i];
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const int64_t t = i * kLanes + lane;
      if (lane >= 4 && !tv.has_hi) {
        std::fill(z + t * z_tile(op), z + t * z_tile(op) + kXi * op, 0.0f);
        continue;
      }
      const int64_t p = (lane < 4 ? tv.out_lo + 2 * lane : tv.out_hi + 2 * (lane - 4));
      for (int64_t k = 0; k < op; k += kLanes) {
        const __m256 a = _mm256_loadu_ps(gt + p * op + k);
        const __m256 b = _mm256_loadu_ps(gt + (p + 1) * op + k);
        const __m256 c = _mm256_loadu_ps(gt + (p + out_w) * op + k);
        const __m256 d = _mm256_loadu_ps(gt + (p + out_w + 1) * op + k);
        // A dY: rows (a, b), (a + c, b + d), (a - c, b - d), (-c, -d); each row (p, q) then
        // times A^T: (p, p + q, p - q, -q).
        const __m256 rows[4][2] = {
            {a, b},
            {_mm256_add_ps(a, c), _mm256_add_ps(b, d)},
            {_mm256_sub_ps(a, c), _mm256_sub_ps(b, d)},
            {_mm256_sub_ps(_mm256_setzero_ps(), c), _mm256_sub_ps(_mm256_setzero_ps(), d)}};
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const __m256 pv = rows[r][0], qv = rows[r][1];
          float* dst = z + t * z_tile(op) + int64_t{4} * r * op + k;
          const int64_t step = op;
          _mm256_storeu_ps(dst, pv);
          _mm256_storeu_ps(dst + step, _mm256_add_ps(pv, qv));
          _mm256_storeu_ps(dst + 2 * step, _mm256_sub_ps(pv, qv));
          _mm256_storeu_ps(dst + 3 * step, _mm256_sub_ps(_mm256_setzero_ps(), qv));
        }
      }
    }
  }
}

// grad_transform with AVX-512, for op a multiple of 16 (the AVX-512 weight tiles' rounding):
// 16 output channels per register, the same sums.
ECH_AVX512 void grad_transform_512(const float* gt, int64_t op, const TileVector* vectors,
                                   int64_t count, int64_t out_w, float* z) {
  for (int64_t i = 0; i < count; ++i) {
    const TileVector& tv = vectors[i];
    for (int64_t lane = 0; lane < kLanes; ++lane) {
      const int64_t t = i * kLanes + lane;
      if (lane >= 4 && !tv.has_hi) {
        std::fill(z + t * z_tile(op), z + t * z_tile(op) + kXi * op, 0.0f);
        continue;
      }
      const int64_t p = (lane < 4 ? tv.out_lo + 2 * lane : tv.out_hi + 2 * (lane - 4));
      for (int64_t k = 0; k < op; k += 16) {
        const __m512 a = _mm512_loadu_ps(gt + p * op + k);
        const __m512 b = _mm512_loadu_ps(gt + (p + 1) * op + k);
        const __m512 c = _mm512_loadu_ps(gt + (p + out_w) * op + k);
        const __m512 d = _mm512_loadu_ps(gt + (p + out_w + 1) * op + k);
        const __m512 rows[4][2] = {
            {a, b},
            {_mm512_add_ps(a, c), _mm512_add_ps(b, d)},
            {_mm512_sub_ps(a, c), _mm512_sub_ps(b, d)},
            {_mm512_sub_ps(_mm512_setzero_ps(), c), _mm512_sub_ps(_mm512_setzero_ps(), d)}};
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) {
          const __m512 pv = rows[r][0], qv = rows[r][1];
          float* dst = z + t * z_tile(op) + int64_t{4} * r * op + k;
          _mm512_storeu_ps(dst, pv);
          _mm512_storeu_ps(dst + op, _mm512_add_ps(pv, qv));
          _mm512_storeu_ps(dst + 2 * op, _mm512_sub_ps(pv, qv));
          _mm512_storeu_ps(dst + 3 * op, _mm512_sub_ps(_mm512_setzero_ps(), qv));
        }
      }
    }
  }
}

// grad_w (O, C, 3, 3) = G^T dU G per (o, c), from du[xi][c][o] (output channels op apart).
void weight_from_du(const Conv2dGeometry& a, const float* du, int64_t op, float* grad_w) {
  // dw = G^T dU G per (o, c), output channels split across the pool.
  parallel_for(a.o, 1, [&](int64_t o_begin, int64_t o_end) {
    for (int64_t o = o_begin; o < o_end; ++o)
      for (int64_t c = 0; c < a.c; ++c) {
        float d[4][4];
        for (int64_t xi = 0; xi < kXi; ++xi) d[xi / 4][xi % 4] = du[(xi * a.c + c) * op + o];
        float t[3][4];  // G^T dU
        for (int k = 0; k < 4; ++k) {
          t[0][k] = d[0][k] + 0.5f * (d[1][k] + d[2][k]);
          t[1][k] = 0.5f * (d[1][k] - d[2][k]);
          t[2][k] = 0.5f * (d[1][k] + d[2][k]) + d[3][k];
        }
        float* g = grad_w + (o * a.c + c) * 9;
        for (int r = 0; r < 3; ++r) {
          g[r * 3 + 0] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
          g[r * 3 + 1] = 0.5f * (t[r][1] - t[r][2]);
          g[r * 3 + 2] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
        }
      }
  });
}

void backward_weight_impl(const Conv2dGeometry& a, const float* grad_out, const float* x,
                          float* grad_w) {
  const Layout l = layout_of(a);
  const std::vector<TileVector> vectors = tile_vectors(a, l);
  const bool wide = conv_winograd_isa() == WinogradIsa::Avx512;
  const int64_t o_lanes = wide ? 16 : kLanes;
  const int64_t op = (a.o + o_lanes - 1) / o_lanes * o_lanes;  // channels rounded up to vectors
  const int64_t positions = a.out_h * a.out_w, image = a.c * a.h * a.w;
  const int64_t chunks = chunk_count(a.n, 1), partial = kXi * a.c * op;
  // Per chunk dU[xi][c][o] in the caller's scratch (slot 1; tasks use their own slot 0).
  const size_t partial_count = static_cast<size_t>(std::max<int64_t>(chunks, 1) * partial);
  float* partials = scratch<float>(1, partial_count);
  if (chunks == 0) std::fill(partials, partials + partial, 0.0f);  // an empty batch: dw = 0
  // The register tiles of one xi (output channels o0.., input channels c0..), found once here
  // (balanced_block's divisions inside the xi loop cost ~1%). Vectors of output channels per
  // tile: AVX-512 4, 2 or 1 of 16; AVX2 2 or 1 of 8.
  struct Tile {
    int64_t o0, c0;
    WeightTileFn fn;
  };
  std::vector<Tile> tiles_of_xi;
  for (int64_t o0 = 0, vectors = 0; o0 < op; o0 += vectors * o_lanes) {
    const int64_t left = (op - o0) / o_lanes;
    vectors = left >= 4 && wide ? 4 : left >= 2 ? 2 : 1;
    const int64_t block = wide ? weight_block_512(vectors) : kBlock;
    for (int64_t c0 = 0, b = 0; c0 < a.c; c0 += b) {
      b = balanced_block(a.c - c0, block);
      tiles_of_xi.push_back({o0, c0,
                             !wide ? (vectors == 2 ? weight_tile_for<2>(b) : weight_tile_for<1>(b))
                             : vectors == 4 ? weight_tile_512_for<4, kXi>(b)
                             : vectors == 2 ? weight_tile_512_for<2, kXi>(b)
                                            : weight_tile_512_for<1, kXi>(b)});
    }
  }
  // Blocks of 16 tiles per pass: one while dU fits in 64 KiB (ResNet-20's 16 and 32 channels: V,
  // Z and dU stay in L1 / L2 between the transforms and the GEMMs, 20% faster than passes of 64
  // tiles for 16 channels); 4 for larger dU, whose reload per pass would otherwise dominate.
  const int64_t pass_blocks = partial <= (int64_t{16} << 10) ? 1 : 4;
  const int64_t v_stride = a.c * kChannelStride;  // floats between a pass's blocks in V
  const int64_t blocks_per_image = (l.vectors + 1) / 2;
  // AVX-512 transforms the image itself, a block (the forward's pass of two vectors) at a time;
  // AVX2 a padded copy, to the same bits.
  const std::vector<DirectPass> direct = wide ? direct_passes(a, l) : std::vector<DirectPass>();
  const int64_t padded_size = wide ? 0 : a.c * l.plane;
  parallel_chunks(a.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    float* du = partials + chunk * partial;
    std::fill(du, du + partial, 0.0f);  // by the chunk's thread: in parallel, and cache-warm
    float* padded =
        scratch<float>(0, static_cast<size_t>(padded_size + positions * op +
                                              pass_blocks * (v_stride + kBlockTiles * z_tile(op))));
    float* gt = padded + padded_size;
    float* v = gt + positions * op;
    float* z = v + pass_blocks * v_stride;
    std::fill(padded, padded + padded_size, 0.0f);  // the padding; pad_image writes the rest
    // The next images (those the next pass starts on), a few lines per GEMM over the passes of
    // this image (or the pass of these images), a share per position: their first reads
    // otherwise stall on memory, and a burst of prefetches at once waits on the line fill
    // buffers.
    const int64_t passes_per_image = std::max<int64_t>(1, blocks_per_image / pass_blocks);
    const int64_t images_ahead = std::max<int64_t>(1, pass_blocks / blocks_per_image);
    // The GEMMs of a pass of `count` blocks whose last is block q of image n.
    const auto gemms = [&](int64_t count, int64_t n, int64_t q) {
      const int64_t ahead = std::min(images_ahead, end - n - 1);
      for (int64_t xi = 0; xi < kXi; ++xi) {
        if (ahead > 0) {
          const int64_t part = q / pass_blocks * kXi + xi, parts = passes_per_image * kXi;
          prefetch_part(x + (n + 1) * image, ahead * image * 4, part, parts);
          prefetch_part(grad_out + (n + 1) * a.o * positions, ahead * a.o * positions * 4, part,
                        parts);
        }
        for (const Tile& tile : tiles_of_xi)
          tile.fn(v + tile.c0 * kChannelStride + xi * kBlockTiles, v_stride, z + xi * op + tile.o0,
                  count, op, du + (xi * a.c + tile.c0) * op + tile.o0);
      }
    };
    // The chunk's blocks of tiles, image after image, in passes of pass_blocks.
    int64_t in_pass = 0;
    for (int64_t n = begin; n < end; ++n) {
      if (!wide) pad_image(a, l, x + n * image, padded);
      conv_direct_transpose_planes(grad_out + n * a.o * positions, a.o, positions, op, gt);
      for (int64_t q = 0; q < blocks_per_image; ++q) {
        const int64_t count = std::min<int64_t>(2, l.vectors - 2 * q);  // vectors in the block
        float* v_block = v + in_pass * v_stride;
        float* z_block = z + in_pass * kBlockTiles * z_tile(op);
        for (int64_t c = 0; c < a.c; ++c) {
          if (wide) {
            input_transform_direct_512(x + n * image + c * a.h * a.w, a.w,
                                       direct[static_cast<size_t>(q)],
                                       v_block + c * kChannelStride);
          } else {
            input_transform(padded + c * l.plane, l, vectors.data() + 2 * q, count,
                            v_block + c * kChannelStride, 0, kLanes, kBlockTiles);
            if (count == 1)  // a missing second vector: V 0 as the AVX-512 transform's
              for (int64_t xi = 0; xi < kXi; ++xi)
                std::fill_n(v_block + c * kChannelStride + xi * kBlockTiles + kLanes, kLanes, 0.0f);
          }
        }
        (wide ? grad_transform_512 : grad_transform)(gt, op, vectors.data() + 2 * q, count, a.out_w,
                                                     z_block);
        if (count == 1)  // its tiles' Z 0 too
          std::fill_n(z_block + kLanes * z_tile(op), kLanes * z_tile(op), 0.0f);
        if (++in_pass == pass_blocks || (n + 1 == end && q + 1 == blocks_per_image)) {
          gemms(in_pass, n, q);
          in_pass = 0;
        }
      }
    }
  });
  sum_chunk_partials(partials, partial, chunks);
  weight_from_du(a, partials, op, grad_w);
}

}  // namespace
}  // namespace winograd

void conv_winograd_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                   float* grad_w) {
  ECH_CHECK(conv_winograd_usable(a), "conv_winograd_backward_weight: geometry not supported (",
            a.kernel_h, "x", a.kernel_w, " window, stride ", a.stride_h, ", output ", a.out_h, "x",
            a.out_w, ", ", a.c, " input channels)");
  if (conv_winograd_f43_chosen(a)) return conv_winograd43_backward_weight(a, grad_out, x, grad_w);
  winograd::backward_weight_impl(a, grad_out, x, grad_w);
}

#else  // not x86: never usable

void conv_winograd_backward_weight(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_winograd_backward_weight: needs an x86 CPU with AVX2");
}

#endif

}  // namespace echelon::cpu::fast
