// The AVX-512 forward / backward-data input transform reading the unpadded image (declared in
// conv_winograd_tiles.h): no padded copy of the image is written. Each row of a quad's 4 tiles
// is 10 input columns b .. b + 9 (b = 2 j0 - pad); a 16-float load from b (a vector's two
// quads: both 8-float halves) and one from b + 2, zero outside the image by their masks, give
// the tiles' columns 2j, 2j + 1 (the even and odd lanes of the first) and 2j + 2, 2j + 3 (of the
// second), picked for the pass's two vectors by one two-source permute each.
#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace echelon::cpu::fast::winograd {

namespace {

// The lanes of input columns [first, first + 8) that lie in [0, width), as bits 0-7.
unsigned column_lanes(int64_t first, int64_t width) {
  unsigned bits = 0;
  for (int64_t i = 0; i < 8; ++i)
    if (first + i >= 0 && first + i < width) bits |= 1u << i;
  return bits;
}

}  // namespace

std::vector<DirectPass> direct_passes(const Conv2dGeometry& a, const Layout& l) {
  const int64_t per_row = l.tile_cols / 4, passes = (l.vectors + 1) / 2;
  std::vector<DirectPass> out(static_cast<size_t>(passes));
  for (int64_t p = 0; p < passes; ++p) {
    DirectPass& d = out[static_cast<size_t>(p)];
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t half = 0; half < 2; ++half) {  // the lo quad (lanes 0-7), the hi quad (8-15)
        const int64_t q = 4 * p + 2 * i + half;   // quads 2v, 2v + 1 of vector v = 2p + i
        if (q >= l.quads) continue;               // no such quad: its lanes stay 0
        const int64_t th = q / per_row, j0 = q % per_row * 4;
        const int64_t top = 2 * th - a.pad_h, left = 2 * j0 - a.pad_w;
        // The hi half's offset is taken 8 floats back: its load fills lanes 8-15.
        (half == 0 ? d.lo : d.hi)[i] = top * a.w + left - 8 * half;
        for (int64_t r = 0; r < 4; ++r) {
          if (top + r < 0 || top + r >= a.h) continue;
          for (int64_t s = 0; s < 2; ++s)
            d.lanes[r][s][i] |= static_cast<uint16_t>(column_lanes(left + 2 * s, a.w) << 8 * half);
        }
      }
      d.joined[i] = d.hi[i] == d.lo[i];  // the hi quad's 8 columns follow the lo quad's
    }
  }
  return out;
}

// The 16 floats of vector i of the pass at `offset` (row r * W + shift) from its quads' origins;
// Joined: both vectors' quads are joined (one load each).
template <bool Joined>
ECH_WINOGRAD_AVX512 inline __m512 load_vector(const float* x, const DirectPass& d, int64_t i,
                                              int64_t r, int64_t s, int64_t offset) {
  const __mmask16 lanes = d.lanes[r][s][i];
  if (Joined) return _mm512_maskz_loadu_ps(lanes, x + d.lo[i] + offset);
  const __m512 lo = _mm512_maskz_loadu_ps(lanes & 0x00FF, x + d.lo[i] + offset);
  return _mm512_mask_loadu_ps(lo, lanes & 0xFF00, x + d.hi[i] + offset);
}

// The pass's 4 x 4 input columns: d4[r][k] holds column 2j + k of tile row r of its 16 tiles.
template <bool Joined>
ECH_WINOGRAD_AVX512 inline void load_pass(const float* x, int64_t width, const DirectPass& d,
                                          __m512 (&d4)[4][4]) {
  // Lanes 0-7: the even (odd) lanes of the first source; 8-15: those of the second (16 + ...).
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
#pragma GCC unroll 4
  for (int64_t r = 0; r < 4; ++r)
#pragma GCC unroll 2
    for (int64_t s = 0; s < 2; ++s) {
      const int64_t offset = r * width + 2 * s;
      const __m512 v0 = load_vector<Joined>(x, d, 0, r, s, offset);
      const __m512 v1 = load_vector<Joined>(x, d, 1, r, s, offset);
      d4[r][2 * s] = _mm512_permutex2var_ps(v0, even, v1);     // column 2j + 2s
      d4[r][2 * s + 1] = _mm512_permutex2var_ps(v0, odd, v1);  // 2j + 2s + 1
    }
}

ECH_WINOGRAD_AVX512 void input_transform_direct_512(const float* x, int64_t width,
                                                    const DirectPass& d, float* v_c) {
  __m512 d4[4][4];
  if (d.joined[0] && d.joined[1])
    load_pass<true>(x, width, d, d4);
  else
    load_pass<false>(x, width, d, d4);
  __m512 t[4][4];  // B^T d: rows
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[0][k] = _mm512_sub_ps(d4[0][k], d4[2][k]);
    t[1][k] = _mm512_add_ps(d4[1][k], d4[2][k]);
    t[2][k] = _mm512_sub_ps(d4[2][k], d4[1][k]);
    t[3][k] = _mm512_sub_ps(d4[1][k], d4[3][k]);
  }
  constexpr int64_t step = 2 * kLanes;
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) {  // (B^T d) B: columns
    _mm512_storeu_ps(v_c + (4 * r + 0) * step, _mm512_sub_ps(t[r][0], t[r][2]));
    _mm512_storeu_ps(v_c + (4 * r + 1) * step, _mm512_add_ps(t[r][1], t[r][2]));
    _mm512_storeu_ps(v_c + (4 * r + 2) * step, _mm512_sub_ps(t[r][2], t[r][1]));
    _mm512_storeu_ps(v_c + (4 * r + 3) * step, _mm512_sub_ps(t[r][1], t[r][3]));
  }
}

}  // namespace echelon::cpu::fast::winograd

#endif
