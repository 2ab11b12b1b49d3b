// Internal to conv_winograd43.cpp (forward, backward data) and conv_winograd43_weight.cpp
// (weight gradient): the F(4x4, 3x3) padded layout and the input transform both use. x86 only,
// AVX-512 (the callers run only where conv_winograd43_usable()).
#pragma once

#include <algorithm>
#include <cstdint>

#include <echelon/kernels/conv.h>
#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace echelon::cpu::fast::winograd43 {

constexpr int64_t kXi = 36;            // transformed positions of a 6x6 tile
constexpr int64_t kVector = kXi * 16;  // floats of one channel's V (or M) for a vector of 16 tiles

// G (6 x 3): U = G g G^T, and the weight gradient's dw = G^T dU G.
inline constexpr float kG[6][3] = {{1.0f / 4, 0, 0},
                                   {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                                   {-1.0f / 6, 1.0f / 6, -1.0f / 6},
                                   {1.0f / 24, 1.0f / 12, 1.0f / 6},
                                   {1.0f / 24, -1.0f / 12, 1.0f / 6},
                                   {0, 0, 1}};

// The padded image: channel c, phase ph, padded row r, index q holds padded column ph + 4q, i.e.
// x[c][r - pad][ph + 4q - pad] or 0. A tile (th, j) reads rows 4th .. 4th + 5 and, for its
// column k, phase k % 4 at index j + k / 4.
struct Layout {
  int64_t rows, row, phase, plane;  // padded rows, floats per phase row, phase and channel strides
  int64_t tile_cols, run;           // run: tiles of one tile row in a vector (2, 4, 8 or 16)
  int64_t images, vectors;  // images per vector (4 for 8x8 outputs, else 1); vectors per group
};

inline Layout layout_of(const Conv2dGeometry& a) {
  Layout l{};
  l.rows = a.out_h + 2;
  l.tile_cols = a.out_w / 4;
  l.row = l.tile_cols + 1;
  l.phase = l.rows * l.row;
  l.plane = 4 * l.phase;
  l.run = std::min<int64_t>(l.tile_cols, 16);
  l.images = l.tile_cols == 2 ? 4 : 1;  // 8x8 outputs: 4 tiles per image, 4 images per vector
  l.vectors = a.out_h / 4 * l.tile_cols * l.images / 16;
  return l;
}

// Writes the image's pixels (x (C, H, W)) into their padded places; the padding is left as it is
// (zeroed once by the caller; every image writes the same places). Per 32 columns: two permutes
// group them by phase (8 per phase, consecutive indices), four 8-lane masked stores place them;
// then 16 at a time (4 per phase), 8, then one by one.
ECH_WINOGRAD_AVX512 void pad_image(const Conv2dGeometry& a, const Layout& l, const float* x,
                                   float* dst);

// The 16 lanes at `p` (the vector's first tile) in runs of Run tiles: PerImage runs on
// consecutive tile rows (4 padded rows, 4 * row floats, apart) of each image, the images
// `image` floats apart; the lanes outside `present` (missing images) read as 0.
template <int Run, int PerImage>
ECH_WINOGRAD_AVX512 inline __m512 load_runs(const float* p, int64_t row, int64_t image,
                                            __mmask16 present) {
  if constexpr (Run == 16) {
    return _mm512_loadu_ps(p);
  } else {
    // Run i fills lanes Run i ..: its load starts Run i floats back (masked loads; the
    // insert intrinsics draw gcc 12's uninitialized warnings).
    __m512 v = _mm512_maskz_loadu_ps(present & ((1u << Run) - 1), p);
#pragma GCC unroll 8
    for (int i = 1; i < 16 / Run; ++i)
      v = _mm512_mask_loadu_ps(
          v, static_cast<__mmask16>(present & (((1u << Run) - 1) << (Run * i))),
          p + i / PerImage * image + int64_t{4} * (i % PerImage) * row - int64_t{Run} * i);
    return v;
  }
}

// B^T d for one column (or row) of 6: Lavin & Gray's
// [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1].
ECH_WINOGRAD_AVX512 inline void input_1d(const __m512 (&d)[6], __m512 (&t)[6]) {
  const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f), two = _mm512_set1_ps(2.0f);
  t[0] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
  t[1] = _mm512_fnmadd_ps(four, _mm512_add_ps(d[1], d[2]), _mm512_add_ps(d[3], d[4]));
  t[2] = _mm512_fmadd_ps(four, _mm512_sub_ps(d[1], d[2]), _mm512_sub_ps(d[4], d[3]));
  const __m512 d13 = _mm512_sub_ps(d[1], d[3]), d42 = _mm512_sub_ps(d[4], d[2]);
  t[3] = _mm512_fnmadd_ps(two, d13, d42);
  t[4] = _mm512_fmadd_ps(two, d13, d42);
  t[5] = _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5]));
}

// v_c[xi][16 tiles] = B^T d B for the vector's tiles in channel c's padded plane; `first` is the
// vector's first tile's offset (padded row 4 th0, index j0) in a phase.
template <int Run, int PerImage>
ECH_WINOGRAD_AVX512 void input_transform(const float* plane, const Layout& l, int64_t first,
                                         int64_t image, __mmask16 present, float* v_c) {
  __m512 t[6][6];  // B^T d: t[i][k], row i of column k
#pragma GCC unroll 6
  for (int k = 0; k < 6; ++k) {
    const float* p = plane + (k % 4) * l.phase + first + k / 4;
    __m512 d[6];
#pragma GCC unroll 6
    for (int r = 0; r < 6; ++r)
      d[r] = load_runs<Run, PerImage>(p + r * l.row, l.row, image, present);
    __m512 col[6];
    input_1d(d, col);
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) t[i][k] = col[i];
  }
#pragma GCC unroll 6
  for (int i = 0; i < 6; ++i) {  // (B^T d) B: rows
    __m512 out[6];
    input_1d(t[i], out);
#pragma GCC unroll 6
    for (int k = 0; k < 6; ++k) _mm512_storeu_ps(v_c + (6 * i + k) * int64_t{16}, out[k]);
  }
}

}  // namespace echelon::cpu::fast::winograd43

#endif
