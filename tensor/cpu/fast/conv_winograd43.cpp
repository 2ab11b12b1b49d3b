// Winograd F(4x4, 3x3) forward with AVX-512 (tensor/cpu/fast/conv_winograd43.h). Per image, or
// per group of 4 images for 8x8 outputs (split across the pool): the zero-padded image with its
// columns split by phase (column mod 4), so column k of 16 neighbouring tiles (padded columns
// 4j + k) is one contiguous run; then per vector of 16 tiles (runs of `run` tiles on 16 / run
// tile rows; for 8x8 outputs each image's 2 x 2 tiles) the input transform into
// V[c][xi][16 tiles], 36 GEMMs M[o][xi][tiles] = sum_c U[xi][o][c] V[c][xi][tiles] (16 output
// channels x 16 tiles in registers) and the output transform into y.
#include <echelon/tensor/cpu/fast/conv_winograd43.h>

#include <algorithm>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_winograd43_tiles.h>
#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace echelon::cpu::fast {

namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
                          __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

}  // namespace

bool conv_winograd43_usable(const Conv2dGeometry& a) {
  if (!(cpu_has_avx512() && a.kernel_h == 3 && a.kernel_w == 3 && a.stride_h == 1 &&
        a.stride_w == 1 && a.dilation_h == 1 && a.dilation_w == 1 && a.pad_h == a.pad_w &&
        a.pad_w >= 0 && a.pad_w <= 2 && a.c >= 8 && a.out_h > 0 && a.out_h % 4 == 0 &&
        a.out_w > 0 && a.out_w % 4 == 0))
    return false;
  const int64_t tile_cols = a.out_w / 4, tile_rows = a.out_h / 4;
  if (tile_cols % 16 == 0) return true;
  if (tile_cols == 2) return tile_rows == 2;  // 8x8 outputs: 4 images per vector
  return (tile_cols == 4 || tile_cols == 8) && tile_rows % (16 / tile_cols) == 0;
}

#if defined(__x86_64__) || defined(__i386__)
namespace winograd43 {

using winograd::balanced_block;
using winograd::GemmTileFn;

constexpr int64_t kBlock = 16;  // output channels per GEMM register tile

// Lanes 4 Q .. 4 Q + 3 of v. (The zero-masked extracts: gcc 12 warns of an uninitialized value
// inside the plain ones and the casts to 256 and 128 bits.)
template <int Q>
ECH_WINOGRAD_AVX512 inline __m128 quarter(__m512 v) {
  return _mm512_maskz_extractf32x4_ps(0xF, v, Q);
}

ECH_WINOGRAD_AVX512 void pad_image(const Conv2dGeometry& a, const Layout& l, const float* x,
                                   float* dst) {
  // Of 32 columns (two registers): lane 8 h + m of pair p takes column i0(2p + h) + 4m, the
  // phase ph = 2p + h; i0(ph) = (ph - pad) mod 4. Of 16: lane 4 ph + m takes i0(ph) + 4m.
  alignas(64) int32_t order32[2][16], order16[16];
  int64_t first[4];  // index of phase ph's first column, less col0 / 4
  for (int64_t ph = 0; ph < 4; ++ph) {
    const int64_t i0 = (ph - a.pad_w + 8) % 4;
    for (int64_t m = 0; m < 8; ++m) order32[ph / 2][8 * (ph % 2) + m] = int32_t(i0 + 4 * m);
    for (int64_t m = 0; m < 4; ++m) order16[4 * ph + m] = int32_t(i0 + 4 * m);
    first[ph] = (i0 + a.pad_w) / 4;
  }
  const __m512i phases01 = _mm512_load_si512(order32[0]), phases23 = _mm512_load_si512(order32[1]);
  const __m512i by_phase = _mm512_load_si512(order16);
  const int64_t thirty_twos = a.w / 32 * 32, sixteens = a.w / 16 * 16;
  const bool eight = a.w - sixteens >= 8;
  const __m512 zero = _mm512_setzero_ps();
  const int64_t tail = sixteens + (eight ? 8 : 0), eight_at = sixteens / 4;
  int64_t offset[4];  // of phase ph's index first[ph] in a padded row
  for (int64_t ph = 0; ph < 4; ++ph) offset[ph] = ph * l.phase + first[ph];
  // Whole 8-, 4- and 2-float runs per phase with plain 256-, 128- and 64-bit stores (not masked
  // 512-bit stores), the rows walked by pointer: a row of 32 columns is ~10 instructions, so
  // per-row index arithmetic counts (9.6% -> 7.2% of a ResNet-20 step on an AMD EPYC).
  for (int64_t c = 0; c < a.c; ++c) {
    const float* src = x + c * a.h * a.w;
    float* row = dst + c * l.plane + a.pad_h * l.row;
    for (int64_t r = 0; r < a.h; ++r, src += a.w, row += l.row) {
      float* const at[4] = {row + offset[0], row + offset[1], row + offset[2], row + offset[3]};
      for (int64_t col = 0, q = 0; col < thirty_twos; col += 32, q += 8) {
        const __m512 lo = _mm512_loadu_ps(src + col), hi = _mm512_loadu_ps(src + col + 16);
        const __m512d p01 = _mm512_castps_pd(_mm512_permutex2var_ps(lo, phases01, hi));
        const __m512d p23 = _mm512_castps_pd(_mm512_permutex2var_ps(lo, phases23, hi));
        _mm256_storeu_pd(reinterpret_cast<double*>(at[0] + q),
                         _mm512_maskz_extractf64x4_pd(0xFF, p01, 0));
        _mm256_storeu_pd(reinterpret_cast<double*>(at[1] + q),
                         _mm512_maskz_extractf64x4_pd(0xFF, p01, 1));
        _mm256_storeu_pd(reinterpret_cast<double*>(at[2] + q),
                         _mm512_maskz_extractf64x4_pd(0xFF, p23, 0));
        _mm256_storeu_pd(reinterpret_cast<double*>(at[3] + q),
                         _mm512_maskz_extractf64x4_pd(0xFF, p23, 1));
      }
      for (int64_t col = thirty_twos, q = thirty_twos / 4; col < sixteens; col += 16, q += 4) {
        // Phase ph's 4 lanes (4 ph ..) go to its index.
        const __m512 v = _mm512_permutex2var_ps(_mm512_loadu_ps(src + col), by_phase, zero);
        _mm_storeu_ps(at[0] + q, quarter<0>(v));
        _mm_storeu_ps(at[1] + q, quarter<1>(v));
        _mm_storeu_ps(at[2] + q, quarter<2>(v));
        _mm_storeu_ps(at[3] + q, quarter<3>(v));
      }
      if (eight) {  // 8 columns: lanes 4 ph, 4 ph + 1 of the 16-column order
        const __m512 v =
            _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(0x00FF, src + sixteens), by_phase, zero);
        _mm_storel_pi(reinterpret_cast<__m64*>(at[0] + eight_at), quarter<0>(v));
        _mm_storel_pi(reinterpret_cast<__m64*>(at[1] + eight_at), quarter<1>(v));
        _mm_storel_pi(reinterpret_cast<__m64*>(at[2] + eight_at), quarter<2>(v));
        _mm_storel_pi(reinterpret_cast<__m64*>(at[3] + eight_at), quarter<3>(v));
      }
      for (int64_t col = tail; col < a.w; ++col) {
        const int64_t p = col + a.pad_w;
        row[(p % 4) * l.phase + p / 4] = src[col];
      }
    }
  }
}

// A^T m for one column (or row) of 6: [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
ECH_WINOGRAD_AVX512 inline void output_1d(const __m512 (&m)[6], __m512 (&y)[4]) {
  const __m512 p12 = _mm512_add_ps(m[1], m[2]), m12 = _mm512_sub_ps(m[1], m[2]);
  const __m512 p34 = _mm512_add_ps(m[3], m[4]), m34 = _mm512_sub_ps(m[3], m[4]);
  y[0] = _mm512_add_ps(_mm512_add_ps(m[0], p12), p34);
  y[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), m34, m12);
  y[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), p34, p12);
  y[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), m34, m12), m[5]);
}

// Stores the lanes of v at p, or with accumulate adds them to what is there (p[i] + v[i], as the
// autograd engine's gradient sum would, without its separate pass).
ECH_WINOGRAD_AVX512 inline void store_or_add(float* p, __mmask16 lanes, __m512 v, bool accumulate) {
  if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, p), v);
  _mm512_mask_storeu_ps(p, lanes, v);
}

// y plane of one output channel = A^T m A + bias (with accumulate: y +=) for the vector's 16
// tiles, whose transformed products are m_o[xi][16]; y_first: the vector's first output
// (4 th0, 4 j0) in the plane; with 4 images per vector (Run 2), the images' planes `image` floats
// apart, `images` of them present.
template <int Run>
ECH_WINOGRAD_AVX512 void output_transform(const float* m_o, float bias, int64_t out_w,
                                          int64_t image, int64_t images, bool accumulate,
                                          float* y_first) {
  // Tiles t, t + 1 of (a, b) interleaved: lanes (a[t], b[t]) for t = 0..7 (Low) or 8..15.
  const __m512i pairs_low =
      _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i pairs_high =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  // Of two pair vectors (y0 y1 of 8 tiles, y2 y3 of the same 8): 4 tiles' 4 columns in order,
  // tiles 0-3 (Low) or 4-7.
  const __m512i quads_low =
      _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);  // 64-bit lanes: (y0 y1) of t, (y2 y3) of t
  const __m512i quads_high = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
  __m512 s[4][6];  // A^T m: s[r][k]
#pragma GCC unroll 6
  for (int k = 0; k < 6; ++k) {
    __m512 m[6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) m[i] = _mm512_loadu_ps(m_o + (6 * i + k) * int64_t{16});
    __m512 col[4];
    output_1d(m, col);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) s[r][k] = col[r];
  }
  const __m512 b = _mm512_set1_ps(bias);
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {  // (A^T m) A: rows
    __m512 y[4];
    output_1d(s[r], y);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) y[k] = _mm512_add_ps(y[k], b);
    const __m512 y01[2] = {_mm512_permutex2var_ps(y[0], pairs_low, y[1]),
                           _mm512_permutex2var_ps(y[0], pairs_high, y[1])};
    const __m512 y23[2] = {_mm512_permutex2var_ps(y[2], pairs_low, y[3]),
                           _mm512_permutex2var_ps(y[2], pairs_high, y[3])};
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {  // tiles 4q .. 4q + 3: 16 contiguous outputs of row r
      const __m512d lo = _mm512_castps_pd(y01[q / 2]), hi = _mm512_castps_pd(y23[q / 2]);
      const __m512 cols =
          _mm512_castpd_ps(_mm512_permutex2var_pd(lo, q % 2 ? quads_high : quads_low, hi));
      if constexpr (Run == 2) {  // image q's two runs of 2 tiles, on tile rows 0 and 1
        if (q >= images) continue;
        float* out = y_first + q * image + r * out_w;
        store_or_add(out, 0x00FF, cols, accumulate);
        store_or_add(out + 4 * out_w - 8, 0xFF00, cols, accumulate);
      } else {
        const int64_t tile = int64_t{4} * q, run_row = tile / Run, in_run = tile % Run;
        store_or_add(y_first + (4 * run_row + r) * out_w + 4 * in_run, 0xFFFF, cols, accumulate);
      }
    }
  }
}

// U = G g G^T of output channels o0 .. o0 + b - 1 (b <= 16, the lanes) and input channel c: nine
// gathers load their 3x3 windows and each of U's 36 entries is one masked store of b consecutive
// floats at u_c + xi * per_xi. Every product is kept, zeros of G included, so an Inf in g spreads
// as in the scalar formula.
ECH_WINOGRAD_AVX512 void transform_block(const float* g, int64_t o_stride, int64_t b,
                                         int64_t per_xi, float* u_c) {
  const auto lanes = static_cast<__mmask16>((1u << b) - 1);
  const __m512i lane_offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int32_t>(o_stride)));
  __m512 gv[9];
  for (int k = 0; k < 9; ++k)
    gv[k] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, lane_offsets, g + k, 4);
  __m512 t[6][3];  // G g
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 3; ++k)
      t[i][k] = _mm512_fmadd_ps(_mm512_set1_ps(kG[i][2]), gv[6 + k],
                                _mm512_fmadd_ps(_mm512_set1_ps(kG[i][1]), gv[3 + k],
                                                _mm512_mul_ps(_mm512_set1_ps(kG[i][0]), gv[k])));
  for (int i = 0; i < 6; ++i)
    for (int k = 0; k < 6; ++k)
      _mm512_mask_storeu_ps(
          u_c + (6 * i + k) * per_xi, lanes,
          _mm512_fmadd_ps(t[i][2], _mm512_set1_ps(kG[k][2]),
                          _mm512_fmadd_ps(t[i][1], _mm512_set1_ps(kG[k][1]),
                                          _mm512_mul_ps(t[i][0], _mm512_set1_ps(kG[k][0])))));
}

// U of every (o, c), stored per block of up to `block` output channels from o0:
// u[xi*O*C + o0*C + c*b + j] = U[xi] of (o0 + j, c), g = w[o][c] (3x3, row-major). The weights are
// transformed on every call, so input channels are split across the pool (serial, this was 2% of
// a two-thread ResNet-20 step).
void transform_weights(const Conv2dGeometry& a, const float* w, int64_t block, float* u) {
  ECH_CHECK(block >= 1 && block <= 16 && a.c <= (int64_t{1} << 31) / (int64_t{9} * 16),
            "transform_weights: block ", block, " or ", a.c, " input channels out of range");
  const int64_t per_xi = a.o * a.c;
  parallel_for(a.c, 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
      b = balanced_block(a.o - o0, block);
      for (int64_t c = c_begin; c < c_end; ++c)
        transform_block(w + (o0 * a.c + c) * 9, 9 * a.c, b, per_xi, u + o0 * a.c + c * b);
    }
  });
}

template <int Run>
void forward_run(const Conv2dGeometry& a, const Layout& l, const float* x, const float* u,
                 const float* bias, bool accumulate, float* y) {
  constexpr int kPerImage = Run == 2 ? 2 : 16 / Run;  // runs of one image in a vector
  struct Block {
    int64_t o0;
    GemmTileFn tile;
  };
  std::vector<Block> blocks;
  for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
    b = balanced_block(a.o - o0, kBlock);
    blocks.push_back({o0, winograd::gemm_tile_512_pick(b)});
  }
  const int64_t image = a.c * a.h * a.w, out_image = a.o * a.out_h * a.out_w;
  const int64_t out_plane = a.out_h * a.out_w, padded_image = a.c * l.plane;
  const int64_t padded_size = l.images * padded_image, groups = (a.n + l.images - 1) / l.images;
  parallel_for(groups, 1, [&](int64_t begin, int64_t end) {
    float* padded = scratch<float>(0, static_cast<size_t>(padded_size + (a.c + a.o) * kVector));
    float* v = padded + padded_size;
    float* m = v + a.c * kVector;
    std::fill(padded, padded + padded_size, 0.0f);  // the padding; pad_image writes the rest
    for (int64_t group = begin; group < end; ++group) {
      const int64_t n0 = group * l.images, images = std::min(l.images, a.n - n0);
      // The lanes of the images present (a batch's last group may lack some).
      const auto present =
          static_cast<__mmask16>(images == l.images ? 0xFFFF : (1u << 16 / l.images * images) - 1);
      for (int64_t i = 0; i < images; ++i)
        pad_image(a, l, x + (n0 + i) * image, padded + i * padded_image);
      const int64_t next = std::min(l.images, a.n - n0 - images);  // images of the next group
      for (int64_t vec = 0; vec < l.vectors; ++vec) {
        const int64_t tile = vec * 16, th0 = tile / l.tile_cols, j0 = tile % l.tile_cols;
        for (int64_t c = 0; c < a.c; ++c)
          input_transform<Run, kPerImage>(padded + c * l.plane, l, 4 * th0 * l.row + j0,
                                          padded_image, present, v + c * kVector);
        for (int64_t xi = 0; xi < kXi; ++xi) {
          // The next group's images a few lines per GEMM (see conv_winograd.cpp).
          if (group + 1 < end)
            winograd::prefetch_part(x + (n0 + images) * image, next * image * 4, vec * kXi + xi,
                                    l.vectors * kXi);
          for (const Block& blk : blocks)
            blk.tile(u + xi * a.o * a.c + blk.o0 * a.c, v + xi * 16, a.c, kVector,
                     m + blk.o0 * kVector + xi * 16, kVector);
        }
        float* y_first = y + n0 * out_image + 4 * th0 * a.out_w + 4 * j0;
        for (int64_t o = 0; o < a.o; ++o)
          output_transform<Run>(m + o * kVector, bias ? bias[o] : 0.0f, a.out_w, out_image, images,
                                accumulate, y_first + o * out_plane);
      }
    }
  });
}

}  // namespace winograd43

void conv_winograd43_forward(const Conv2dGeometry& a, const float* x, const float* w,
                             const float* bias, float* y, bool accumulate) {
  ECH_CHECK(conv_winograd43_usable(a), "conv_winograd43_forward: geometry not supported (",
            a.kernel_h, "x", a.kernel_w, " window, stride ", a.stride_h, ", output ", a.out_h, "x",
            a.out_w, ", ", a.c, " input channels)");
  const winograd43::Layout l = winograd43::layout_of(a);
  // In the caller's scratch (slot 2): the pool's tasks only read it.
  float* u = scratch<float>(2, static_cast<size_t>(winograd43::kXi * a.o * a.c));
  winograd43::transform_weights(a, w, winograd43::kBlock, u);
  if (l.run == 16)
    winograd43::forward_run<16>(a, l, x, u, bias, accumulate, y);
  else if (l.run == 8)
    winograd43::forward_run<8>(a, l, x, u, bias, accumulate, y);
  else if (l.run == 4)
    winograd43::forward_run<4>(a, l, x, u, bias, accumulate, y);
  else
    winograd43::forward_run<2>(a, l, x, u, bias, accumulate, y);
}

#else  // not x86: never usable

void conv_winograd43_forward(const Conv2dGeometry&, const float*, const float*, const float*,
                             float*, bool) {
  ECH_CHECK(false, "conv_winograd43_forward: needs an x86 CPU with AVX-512");
}

#endif

}  // namespace echelon::cpu::fast
