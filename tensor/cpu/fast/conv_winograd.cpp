// Winograd F(2x2, 3x3) forward and backward data (tensor/cpu/fast/conv_winograd.h; the weight
// gradient is conv_winograd_weight.cpp; F(4x4, 3x3), where chosen, conv_winograd43.cpp). Per image
// (images split across the pool): with AVX2 the zero-padded image with even and odd columns apart
// (so the 4 columns 2j..2j+3 of 4 neighbouring tiles are 4 contiguous loads; AVX-512 reads the
// image itself, conv_winograd_direct.cpp); then per pass of 16 tiles the input transform into
// V[c][xi][tile], 16 GEMMs M[o][xi][tile] = sum_c U[xi][o][c] V[c][xi][tile] (6 output channels x
// 16 tiles in AVX2 registers, or 16 x 16 with AVX-512), and the output transform into y. Only the
// vector functions are compiled for AVX2 + FMA (ECH_AVX2) or AVX-512 (ECH_AVX512); the usable()
// tests and the ISA setting keep other CPUs away from them.
#include <echelon/tensor/cpu/fast/conv_winograd.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_winograd43.h>
#include <echelon/tensor/cpu/fast/conv_winograd_tiles.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX2 __attribute__((target("avx2,fma")))
#define ECH_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace echelon::cpu::fast {

namespace {

bool cpu_has_avx2() {
#ifdef ECH_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#ifdef ECH_AVX2
  static const bool has = cpu_has_avx2() && __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

std::atomic<WinogradTile>& tile_setting() {
  static std::atomic<WinogradTile> tile{WinogradTile::F4x4};
  return tile;
}

std::atomic<WinogradIsa>& isa_setting() {
  static std::atomic<WinogradIsa> isa{cpu_has_avx512() ? WinogradIsa::Avx512 : WinogradIsa::Avx2};
  return isa;
}

// The backward-data geometry: grad_out as the input, grad_in as the output, padding 2 - pad.
Conv2dGeometry transposed(const Conv2dGeometry& a) {
  Conv2dGeometry t;
  t.kernel_h = t.kernel_w = 3;
  t.pad_h = t.pad_w = 2 - a.pad_w;
  return t.for_input(a.n, a.o, a.out_h, a.out_w, a.c);
}

}  // namespace

void set_conv_winograd_isa(WinogradIsa isa) {
  ECH_CHECK(isa != WinogradIsa::Avx512 || cpu_has_avx512(),
            "set_conv_winograd_isa: this CPU has no AVX-512");
  isa_setting().store(isa);
}

WinogradIsa conv_winograd_isa() {
  return isa_setting().load();
}

bool conv_winograd_avx512_available() {
  return cpu_has_avx512();
}

void set_conv_winograd_tile(WinogradTile tile) {
  tile_setting().store(tile);
}

WinogradTile conv_winograd_tile() {
  return tile_setting().load();
}

bool conv_winograd_f43_chosen(const Conv2dGeometry& a) {
  return conv_winograd_tile() == WinogradTile::F4x4 && conv_winograd_isa() == WinogradIsa::Avx512 &&
         conv_winograd43_usable(a);
}

bool conv_winograd_usable(const Conv2dGeometry& a) {
  return cpu_has_avx2() && a.kernel_h == 3 && a.kernel_w == 3 && a.stride_h == 1 &&
         a.stride_w == 1 && a.dilation_h == 1 && a.dilation_w == 1 && a.pad_h == a.pad_w &&
         a.pad_w >= 0 && a.pad_w <= 2 && a.out_w > 0 && a.out_w % 8 == 0 && a.out_h > 0 &&
         a.out_h % 2 == 0 && a.c >= 8;
}

bool conv_winograd_backward_input_usable(const Conv2dGeometry& a) {
  return a.kernel_h == 3 && a.kernel_w == 3 && a.stride_h == 1 && a.stride_w == 1 &&
         a.dilation_h == 1 && a.dilation_w == 1 && a.pad_h == a.pad_w && a.pad_w >= 0 &&
         a.pad_w <= 2 && conv_winograd_usable(transposed(a));
}

#ifdef ECH_AVX2
namespace winograd {

// Output channels per AVX-512 GEMM tile (16 x 1 of 16 tiles: 16 of the 32 registers accumulate,
// so stage 1's 16 channels are one tile and V is read once per transformed position).
constexpr int kBlock512 = 16;

Layout layout_of(const Conv2dGeometry& a) {
  Layout l{};
  l.rows = a.h + 2 * a.pad_h;  // = out_h + 2: tile row th reads padded rows 2th .. 2th + 3
  l.row = a.out_w / 2 + 1;     // tile column j reads indices j and j + 1 of both phases
  l.phase = l.rows * l.row;
  l.plane = 2 * l.phase;
  l.tile_cols = a.out_w / 2;
  l.quads = a.out_h / 2 * (l.tile_cols / 4);
  l.vectors = (l.quads + 1) / 2;
  return l;
}

// Writes the image's pixels into their padded places; the padding itself is left as it is (the
// caller zeroes the buffer once, and every image writes the same places). Input column col sits
// at padded column col + pad: phase (col + pad) % 2, index (col + pad) / 2. So the even columns
// of a row go to one phase and the odd ones to the other, 16 columns per two vector loads.
ECH_AVX2 void pad_image(const Conv2dGeometry& a, const Layout& l, const float* x /* (C, H, W) */,
                        float* dst) {
  const int64_t even_phase = a.pad_w % 2, odd_phase = 1 - even_phase;
  const int64_t even_at = even_phase * l.phase + a.pad_w / 2;      // where column 0 goes
  const int64_t odd_at = odd_phase * l.phase + (1 + a.pad_w) / 2;  // where column 1 goes
  const int64_t whole = a.w / 16 * 16, eights = a.w / 8 * 8;
  for (int64_t c = 0; c < a.c; ++c)
    for (int64_t r = 0; r < a.h; ++r) {
      const float* src = x + (c * a.h + r) * a.w;
      float* row = dst + c * l.plane + (r + a.pad_h) * l.row;
      float* even = row + even_at;
      float* odd = row + odd_at;
      for (int64_t col = 0; col < whole; col += 16) {
        const __m256 lo = _mm256_loadu_ps(src + col), hi = _mm256_loadu_ps(src + col + 8);
        // Per 128-bit lane: lo 0 2 hi 0 2 | lo 4 6 hi 4 6; then the 64-bit pairs in order.
        const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(even + col / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                             _mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(odd + col / 2, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                            _mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
      }
      if (eights > whole) {  // 8 more columns (all of an 8-wide row): 4 even, 4 odd
        const __m256 v = _mm256_loadu_ps(src + whole);
        const __m256 e = _mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 0, 2, 0));  // 0 2 0 2 | 4 6 4 6
        const __m256 o = _mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 1, 3, 1));
        _mm_storeu_ps(even + whole / 2,
                      _mm256_castps256_ps128(_mm256_castpd_ps(
                          _mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)))));
        _mm_storeu_ps(odd + whole / 2,
                      _mm256_castps256_ps128(_mm256_castpd_ps(
                          _mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)))));
      }
      // `eights` is even: the tail's even columns, then its odd ones. (One loop that picked the
      // destination with `col % 2 ? odd : even` was miscompiled by gcc 12 with ASan in this AVX2
      // function: it stored to 3 * even.)
      for (int64_t col = eights; col < a.w; col += 2) even[col / 2] = src[col];
      for (int64_t col = eights + 1; col < a.w; col += 2) odd[col / 2] = src[col];
    }
}

void prefetch_part(const float* p, int64_t bytes, int64_t part, int64_t parts) {
  constexpr int64_t kLine = 64;
  const int64_t lines = (bytes + kLine - 1) / kLine, per = (lines + parts - 1) / parts;
  const char* base = reinterpret_cast<const char*>(p);
  for (int64_t i = part * per; i < std::min(lines, (part + 1) * per); ++i)
    _mm_prefetch(base + i * kLine, _MM_HINT_T1);
}

std::vector<TileVector> tile_vectors(const Conv2dGeometry& a, const Layout& l) {
  std::vector<TileVector> v(static_cast<size_t>(l.vectors));
  const int64_t per_row = l.tile_cols / 4;
  auto quad = [&](int64_t q, int64_t* in, int64_t* out) {
    const int64_t th = q / per_row, j0 = q % per_row * 4;
    *in = 2 * th * l.row + j0;
    *out = 2 * th * a.out_w + 2 * j0;
  };
  for (int64_t i = 0; i < l.vectors; ++i) {
    TileVector& t = v[static_cast<size_t>(i)];
    t.has_hi = 2 * i + 1 < l.quads;
    quad(2 * i, &t.in_lo, &t.out_lo);
    if (t.has_hi)
      quad(2 * i + 1, &t.in_hi, &t.out_hi);
    else
      t.in_hi = t.in_lo, t.out_hi = t.out_lo;
    t.joined = t.has_hi && t.in_hi == t.in_lo + 4 && t.out_hi == t.out_lo + 8;
  }
  return v;
}

ECH_AVX2 inline __m256 load_quads(const float* lo, const float* hi) {
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

// v_c[vector i][xi] (8 floats each) = B^T d B for the tiles d of `count` vectors of channel c's
// padded plane.
// Vector i goes to v_c + (i / 2) * pair + (i % 2) * half, its positions xi `step` apart: the
// forward interleaves the two vectors of a pass per xi (half 8, step 16: one 16-tile AVX-512
// load), the weight gradient keeps them apart (half kVector, step 8).
ECH_AVX2 void input_transform(const float* plane, const Layout& l, const TileVector* vectors,
                              int64_t count, float* v_c, int64_t pair, int64_t half, int64_t step) {
  for (int64_t i = 0; i < count; ++i) {
    const TileVector& t = vectors[i];
    __m256 d[4][4];
    if (t.joined) {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const float* p = plane + t.in_lo + r * l.row;
        d[r][0] = _mm256_loadu_ps(p);                // padded column 2j
        d[r][1] = _mm256_loadu_ps(p + l.phase);      // 2j + 1
        d[r][2] = _mm256_loadu_ps(p + 1);            // 2j + 2
        d[r][3] = _mm256_loadu_ps(p + l.phase + 1);  // 2j + 3
      }
    } else {
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const float* lo = plane + t.in_lo + r * l.row;
        const float* hi = plane + t.in_hi + r * l.row;
        d[r][0] = load_quads(lo, hi);
        d[r][1] = load_quads(lo + l.phase, hi + l.phase);
        d[r][2] = load_quads(lo + 1, hi + 1);
        d[r][3] = load_quads(lo + l.phase + 1, hi + l.phase + 1);
      }
    }
    __m256 s[4][4];  // B^T d: rows
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      s[0][k] = _mm256_sub_ps(d[0][k], d[2][k]);
      s[1][k] = _mm256_add_ps(d[1][k], d[2][k]);
      s[2][k] = _mm256_sub_ps(d[2][k], d[1][k]);
      s[3][k] = _mm256_sub_ps(d[1][k], d[3][k]);
    }
    float* out = v_c + i / 2 * pair + i % 2 * half;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {  // (B^T d) B: columns
      _mm256_storeu_ps(out + (4 * r + 0) * step, _mm256_sub_ps(s[r][0], s[r][2]));
      _mm256_storeu_ps(out + (4 * r + 1) * step, _mm256_add_ps(s[r][1], s[r][2]));
      _mm256_storeu_ps(out + (4 * r + 2) * step, _mm256_sub_ps(s[r][2], s[r][1]));
      _mm256_storeu_ps(out + (4 * r + 3) * step, _mm256_sub_ps(s[r][1], s[r][3]));
    }
  }
}

// m[j*o_stride + nv*kVector] = sum over c of u[c*B + j] * v[c*c_stride + nv*kVector]: B output
// channels x NV vectors of tiles, accumulated in registers over all input channels.
template <int B, int NV>
ECH_AVX2 void gemm_tile(const float* u, const float* v, int64_t channels, int64_t c_stride,
                        float* m, int64_t o_stride) {
  __m256 acc[B][NV];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) acc[j][k] = _mm256_setzero_ps();
  for (int64_t c = 0; c < channels; ++c) {
    __m256 vv[NV];
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) vv[k] = _mm256_loadu_ps(v + c * c_stride + k * kLanes);
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) {
      const __m256 uj = _mm256_broadcast_ss(u + c * B + j);
#pragma GCC unroll 2
      for (int k = 0; k < NV; ++k) acc[j][k] = _mm256_fmadd_ps(uj, vv[k], acc[j][k]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 2
    for (int k = 0; k < NV; ++k) _mm256_storeu_ps(m + j * o_stride + k * kLanes, acc[j][k]);
}

template <int NV>
GemmTileFn gemm_tile_for(int64_t block) {
  switch (block) {
    case 6:
      return gemm_tile<6, NV>;
    case 5:
      return gemm_tile<5, NV>;
    case 4:
      return gemm_tile<4, NV>;
    case 3:
      return gemm_tile<3, NV>;
    case 2:
      return gemm_tile<2, NV>;
    default:
      return gemm_tile<1, NV>;
  }
}

// The GEMM tile with AVX-512: B (<= 16) output channels x the pass's 16 tiles in one register,
// accumulated over all input channels; Half: a pass of one vector (8 tiles, masked).
template <int B, bool Half>
ECH_AVX512 void gemm_tile_512(const float* u, const float* v, int64_t channels, int64_t c_stride,
                              float* m, int64_t o_stride) {
  const __mmask16 lanes = Half ? 0x00FF : 0xFFFF;
  __m512 acc[B];
#pragma GCC unroll 16
  for (int j = 0; j < B; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < channels; ++c) {
    const __m512 vv = _mm512_maskz_loadu_ps(lanes, v + c * c_stride);
#pragma GCC unroll 16
    for (int j = 0; j < B; ++j) acc[j] = _mm512_fmadd_ps(_mm512_set1_ps(u[c * B + j]), vv, acc[j]);
  }
#pragma GCC unroll 16
  for (int j = 0; j < B; ++j) _mm512_mask_storeu_ps(m + j * o_stride, lanes, acc[j]);
}

template <bool Half>
GemmTileFn gemm_tile_512_for(int64_t block) {
  switch (block) {
    case 16:
      return gemm_tile_512<16, Half>;
    case 15:
      return gemm_tile_512<15, Half>;
    case 14:
      return gemm_tile_512<14, Half>;
    case 13:
      return gemm_tile_512<13, Half>;
    case 12:
      return gemm_tile_512<12, Half>;
    case 11:
      return gemm_tile_512<11, Half>;
    case 10:
      return gemm_tile_512<10, Half>;
    case 9:
      return gemm_tile_512<9, Half>;
    case 8:
      return gemm_tile_512<8, Half>;
    case 7:
      return gemm_tile_512<7, Half>;
    case 6:
      return gemm_tile_512<6, Half>;
    case 5:
      return gemm_tile_512<5, Half>;
    case 4:
      return gemm_tile_512<4, Half>;
    case 3:
      return gemm_tile_512<3, Half>;
    case 2:
      return gemm_tile_512<2, Half>;
    default:
      return gemm_tile_512<1, Half>;
  }
}

GemmTileFn gemm_tile_512_pick(int64_t block) {
  return gemm_tile_512_for<false>(block);
}

// Stores the 2x2 outputs of 8 tiles (row r of each: y0 = column 2j, y1 = column 2j + 1) as the
// two quads' 8 contiguous columns each.
ECH_AVX2 inline void store_row(__m256 y0, __m256 y1, float* lo, float* hi, bool has_hi) {
  const __m256 a = _mm256_unpacklo_ps(y0, y1);  // tiles 0, 1 | 4, 5 interleaved
  const __m256 b = _mm256_unpackhi_ps(y0, y1);  // tiles 2, 3 | 6, 7
  _mm256_storeu_ps(lo, _mm256_permute2f128_ps(a, b, 0x20));
  if (has_hi) _mm256_storeu_ps(hi, _mm256_permute2f128_ps(a, b, 0x31));
}

// y plane of one output channel = A^T m A + bias for the tiles of a pass's `count` (1, 2)
// vectors, whose transformed products are m_o[xi][vector i] (8 floats each).
ECH_AVX2 void output_transform(const float* m_o, const TileVector* vectors, int64_t count,
                               float bias, int64_t out_w, float* y) {
  const __m256 b = _mm256_set1_ps(bias);
  for (int64_t i = 0; i < count; ++i) {
    const float* m = m_o + i * kLanes;  // the pass's two vectors interleave per xi
    __m256 s[2][4];                     // A^T m: rows
#pragma GCC unroll 4
    for (int64_t k = 0; k < 4; ++k) {
      const __m256 m0 = _mm256_loadu_ps(m + (0 + k) * 2 * kLanes);
      const __m256 m1 = _mm256_loadu_ps(m + (4 + k) * 2 * kLanes);
      const __m256 m2 = _mm256_loadu_ps(m + (8 + k) * 2 * kLanes);
      const __m256 m3 = _mm256_loadu_ps(m + (12 + k) * 2 * kLanes);
      s[0][k] = _mm256_add_ps(_mm256_add_ps(m0, m1), m2);
      s[1][k] = _mm256_sub_ps(_mm256_sub_ps(m1, m2), m3);
    }
    const TileVector& t = vectors[i];
#pragma GCC unroll 2
    for (int r = 0; r < 2; ++r) {  // (A^T m) A: columns
      const __m256 y0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[r][0], s[r][1]), s[r][2]), b);
      const __m256 y1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[r][1], s[r][2]), s[r][3]), b);
      store_row(y0, y1, y + t.out_lo + r * out_w, y + t.out_hi + r * out_w, t.has_hi);
    }
  }
}

// output_transform of a forward pass of two vectors with AVX-512: m_o[xi] holds the pass's 16
// tiles in one register; the sums run on all 16, each half then stored as its vector's rows.
// Same values as output_transform.
ECH_AVX512 void output_transform_pass_512(const float* m_o, const TileVector* pass, float bias,
                                          int64_t out_w, float* y) {
  const __m512 b = _mm512_set1_ps(bias);
  // Indices into (y0, y1) (16 + 16 lanes): tile k's y0 then its y1, for tiles 0-7 and 8-15.
  const __m512i first_eight =
      _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i last_eight =
      _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  __m512 s[2][4];  // A^T m: rows
#pragma GCC unroll 4
  for (int64_t k = 0; k < 4; ++k) {
    const __m512 m0 = _mm512_loadu_ps(m_o + (0 + k) * 2 * kLanes);
    const __m512 m1 = _mm512_loadu_ps(m_o + (4 + k) * 2 * kLanes);
    const __m512 m2 = _mm512_loadu_ps(m_o + (8 + k) * 2 * kLanes);
    const __m512 m3 = _mm512_loadu_ps(m_o + (12 + k) * 2 * kLanes);
    s[0][k] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
    s[1][k] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
  }
#pragma GCC unroll 2
  for (int r = 0; r < 2; ++r) {  // (A^T m) A: columns
    const __m512 y0 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s[r][0], s[r][1]), s[r][2]), b);
    const __m512 y1 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(s[r][1], s[r][2]), s[r][3]), b);
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i) {
      // Vector i's 8 tiles (lanes 8i..), columns 2j and 2j + 1 side by side: its lo quad's 8
      // output columns, then its hi quad's.
      const __m512 cols = _mm512_permutex2var_ps(y0, i == 0 ? first_eight : last_eight, y1);
      const TileVector& t = pass[i];
      float* lo = y + t.out_lo + r * out_w;
      if (t.joined) {
        _mm512_storeu_ps(lo, cols);
        continue;
      }
      _mm512_mask_storeu_ps(lo, 0x00FF, cols);
      // out_hi >= 8 (the hi quad lies 4 tiles on or a tile row down): y + out_hi - 8 is in y.
      if (t.has_hi) _mm512_mask_storeu_ps(y + t.out_hi - 8 + r * out_w, 0xFF00, cols);
    }
  }
}

// U = G g G^T of every (o, c), stored per block of up to `block` output channels from o0:
// u[xi*O*C + o0*C + c*b + j] = U[xi] of (o0 + j, c). g is w[o][c] (3x3, row-major).
void transform_weights(const Conv2dGeometry& a, const float* w, int64_t block, float* u) {
  const int64_t per_xi = a.o * a.c;
  for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
    b = balanced_block(a.o - o0, block);
    for (int64_t j = 0; j < b; ++j)
      for (int64_t c = 0; c < a.c; ++c) {
        const float* g = w + ((o0 + j) * a.c + c) * 9;
        float t[4][3];  // G g
        for (int k = 0; k < 3; ++k) {
          t[0][k] = g[k];
          t[1][k] = 0.5f * (g[k] + g[3 + k] + g[6 + k]);
          t[2][k] = 0.5f * (g[k] - g[3 + k] + g[6 + k]);
          t[3][k] = g[6 + k];
        }
        for (int r = 0; r < 4; ++r) {
          const float ur[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]),
                               0.5f * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
          for (int k = 0; k < 4; ++k) u[(4 * r + k) * per_xi + o0 * a.c + c * b + j] = ur[k];
        }
      }
  }
}

void forward_impl(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                  float* y) {
  const Layout l = layout_of(a);
  const std::vector<TileVector> vectors = tile_vectors(a, l);
  // In the caller's scratch (slot 2): the pool's tasks only read it.
  const bool wide = conv_winograd_isa() == WinogradIsa::Avx512;
  const int64_t block = wide ? kBlock512 : kBlock;
  float* u = scratch<float>(2, static_cast<size_t>(kXi * a.o * a.c));
  transform_weights(a, w, block, u);
  const int64_t out_plane = a.out_h * a.out_w;
  // A pass takes 2 tile vectors (16 tiles): their transformed inputs (C x 2 x 16 x 8 floats) and
  // products (O x ...) stay in L1 from the input transform to the output transform.
  constexpr int64_t kPass = 2;
  const int64_t stride = kPass * kVector;  // floats between channels of V and of M
  // The register-tile blocks of the output channels, with the tile functions for passes of two
  // vectors and of one: found once here (balanced_block's divisions in the xi loop cost ~2%).
  struct Block {
    int64_t o0;
    GemmTileFn pair, single;
  };
  std::vector<Block> blocks;
  for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
    b = balanced_block(a.o - o0, block);
    blocks.push_back({o0, wide ? gemm_tile_512_for<false>(b) : gemm_tile_for<2>(b),
                      wide ? gemm_tile_512_for<true>(b) : gemm_tile_for<1>(b)});
  }
  // AVX-512 reads the image itself (direct_passes); AVX2 transforms a padded copy.
  const std::vector<DirectPass> direct = wide ? direct_passes(a, l) : std::vector<DirectPass>();
  const int64_t padded_size = wide ? 0 : a.c * l.plane;
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    float* padded = scratch<float>(0, static_cast<size_t>(padded_size + (a.c + a.o) * stride));
    float* v = padded + padded_size;
    float* m = v + a.c * stride;
    std::fill(padded, padded + padded_size, 0.0f);  // the padding; pad_image writes the rest
    const int64_t image = a.c * a.h * a.w, passes = (l.vectors + kPass - 1) / kPass;
    for (int64_t n = begin; n < end; ++n) {
      if (!wide) pad_image(a, l, x + n * image, padded);
      for (int64_t v0 = 0; v0 < l.vectors; v0 += kPass) {
        const int64_t count = std::min(kPass, l.vectors - v0);
        const TileVector* pass = vectors.data() + v0;
        if (wide)
          for (int64_t c = 0; c < a.c; ++c)
            input_transform_direct_512(x + n * image + c * a.h * a.w, a.w, direct[v0 / kPass],
                                       v + c * stride);
        else
          for (int64_t c = 0; c < a.c; ++c)
            input_transform(padded + c * l.plane, l, pass, count, v + c * stride, 0, kLanes,
                            2 * kLanes);
        for (int64_t xi = 0; xi < kXi; ++xi) {
          // The next image a few lines per GEMM: a burst of a pass's share at once waited on the
          // line fill buffers (4.7% of a ResNet-20 step in prefetch_part).
          if (n + 1 < end)
            prefetch_part(x + (n + 1) * image, image * 4, v0 / kPass * kXi + xi, passes * kXi);
          for (const Block& blk : blocks)
            (count == 2 ? blk.pair : blk.single)(u + xi * a.o * a.c + blk.o0 * a.c,
                                                 v + xi * 2 * kLanes, a.c, stride,
                                                 m + blk.o0 * stride + xi * 2 * kLanes, stride);
        }
        if (wide && count == 2)
          for (int64_t o = 0; o < a.o; ++o)
            output_transform_pass_512(m + o * stride, pass, bias ? bias[o] : 0.0f, a.out_w,
                                      y + (n * a.o + o) * out_plane);
        else
          for (int64_t o = 0; o < a.o; ++o)
            output_transform(m + o * stride, pass, count, bias ? bias[o] : 0.0f, a.out_w,
                             y + (n * a.o + o) * out_plane);
      }
    }
  });
}

}  // namespace winograd

void conv_winograd_forward(const Conv2dGeometry& a, const float* x, const float* w,
                           const float* bias, float* y) {
  ECH_CHECK(conv_winograd_usable(a), "conv_winograd_forward: geometry not supported (", a.kernel_h,
            "x", a.kernel_w, " window, stride ", a.stride_h, ", output ", a.out_h, "x", a.out_w,
            ", ", a.c, " input channels)");
  if (conv_winograd_f43_chosen(a)) return conv_winograd43_forward(a, x, w, bias, y);
  winograd::forward_impl(a, x, w, bias, y);
}

bool conv_winograd_backward_input_adds(const Conv2dGeometry& a) {
  return conv_winograd_backward_input_usable(a) && conv_winograd_f43_chosen(transposed(a));
}

void conv_winograd_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                  float* grad_in, bool accumulate) {
  ECH_CHECK(conv_winograd_backward_input_usable(a),
            "conv_winograd_backward_input: geometry not supported (", a.kernel_h, "x", a.kernel_w,
            " window, stride ", a.stride_h, ", input ", a.h, "x", a.w, ", ", a.o,
            " output channels)");
  ECH_CHECK(!accumulate || conv_winograd_backward_input_adds(a),
            "conv_winograd_backward_input: adding into grad_in needs the F(4x4) path");
  // (C, O, 3, 3), turned by 180 degrees; slot 3 (forward_impl's weights use slot 2).
  float* flipped = scratch<float>(3, static_cast<size_t>(a.o * a.c * 9));
  for (int64_t o = 0; o < a.o; ++o)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t t = 0; t < 9; ++t)
        flipped[(c * a.o + o) * 9 + (8 - t)] = w[(o * a.c + c) * 9 + t];
  const Conv2dGeometry t = transposed(a);
  if (conv_winograd_f43_chosen(t))
    return conv_winograd43_forward(t, grad_out, flipped, nullptr, grad_in, accumulate);
  winograd::forward_impl(t, grad_out, flipped, nullptr, grad_in);
}

#else  // not x86: never usable

void conv_winograd_forward(const Conv2dGeometry&, const float*, const float*, const float*,
                           float*) {
  ECH_CHECK(false, "conv_winograd_forward: needs an x86 CPU with AVX2");
}
bool conv_winograd_backward_input_adds(const Conv2dGeometry&) {
  return false;
}
void conv_winograd_backward_input(const Conv2dGeometry&, const float*, const float*, float*, bool) {
  ECH_CHECK(false, "conv_winograd_backward_input: needs an x86 CPU with AVX2");
}

#endif

}  // namespace echelon::cpu::fast
