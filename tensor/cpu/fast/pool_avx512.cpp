#include <echelon/tensor/cpu/fast/pool_avx512.h>

#ifdef ECHELON_POOL_AVX512

#include <immintrin.h>

#define ECH_AVX512 __attribute__((target("avx512f")))

namespace echelon::cpu::fast::pool_avx512 {
namespace {

// Lanes [0, count) of a 16-lane vector, count clamped to [0, 16].
inline __mmask16 first(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1u);
}

// The 16 windows' 2 adjacent elements of row `row` from column 2 ow on (count windows, the rest
// zero): left[i] = row[2 ow + 2 i], right[i] = row[2 ow + 2 i + 1]. Never reads past them.
ECH_AVX512 inline void load_pairs(const float* row, int64_t count, __m512* left, __m512* right) {
  const __m512 lo = _mm512_maskz_loadu_ps(first(2 * count), row);
  const __m512 hi = _mm512_maskz_loadu_ps(first(2 * count - 16), row + 16);
  const __m512i evens =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  *left = _mm512_permutex2var_ps(lo, evens, hi);
  *right = _mm512_permutex2var_ps(lo, _mm512_add_epi32(evens, _mm512_set1_epi32(1)), hi);
}

// load_pairs' inverse: row[2 ow + 2 i] = left[i], row[2 ow + 2 i + 1] = right[i], i < count.
ECH_AVX512 inline void store_pairs(float* row, int64_t count, __m512 left, __m512 right) {
  const __m512i low_half =
      _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i high_half = _mm512_add_epi32(low_half, _mm512_set1_epi32(8));
  _mm512_mask_storeu_ps(row, first(2 * count), _mm512_permutex2var_ps(left, low_half, right));
  _mm512_mask_storeu_ps(row + 16, first(2 * count - 16),
                        _mm512_permutex2var_ps(left, high_half, right));
}

// Of the 16 lanes set in `lanes`, those whose offset (lanes 0-7 in low, 8-15 in high) is `offset`.
ECH_AVX512 inline __mmask16 lanes_at(__mmask16 lanes, __m512i low, __m512i high, __m512i offset) {
  const __mmask16 low_lanes =
      _mm512_mask_cmpeq_epi64_mask(static_cast<__mmask8>(lanes), low, offset);
  const __mmask16 high_lanes =
      _mm512_mask_cmpeq_epi64_mask(static_cast<__mmask8>(lanes >> 8), high, offset);
  return static_cast<__mmask16>(low_lanes | (high_lanes << 8));
}

}  // namespace

bool cpu_has() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

ECH_AVX512 void max_pool_2x2_forward(const float* plane, int64_t w, int64_t out_h, int64_t out_w,
                                     bool relu, float* y, int64_t* arg) {
  // Offsets of the window's elements from its first, in the order the portable loop visits them.
  const __m512i top_right = _mm512_set1_epi32(1), bottom_left = _mm512_set1_epi32(int(w)),
                bottom_right = _mm512_set1_epi32(int(w + 1));
  const __m512i twice_lane =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const float* r0 = plane + 2 * oh * w;
    const float* r1 = r0 + w;
    for (int64_t ow = 0; ow < out_w; ow += 16) {
      const int64_t count = out_w - ow < 16 ? out_w - ow : 16;
      __m512 v, c[3];
      load_pairs(r0 + 2 * ow, count, &v, &c[0]);
      load_pairs(r1 + 2 * ow, count, &c[1], &c[2]);
      if (relu) {  // v > 0 ? v : +0 (NaN -> +0), the ReLU twin's rule
        v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
        for (__m512& e : c)
          e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(e, _mm512_setzero_ps(), _CMP_GT_OQ), e);
      }
      const __m512i offsets[3] = {top_right, bottom_left, bottom_right};
      __m512i offset = _mm512_setzero_si512();
      for (int k = 0; k < 3; ++k) {  // the first maximum, or the last NaN
        const __mmask16 take =
            _mm512_cmp_ps_mask(c[k], v, _CMP_GT_OQ) | _mm512_cmp_ps_mask(c[k], c[k], _CMP_UNORD_Q);
        v = _mm512_mask_mov_ps(v, take, c[k]);
        offset = _mm512_mask_mov_epi32(offset, take, offsets[k]);
      }
      const __mmask16 lanes = first(count);
      const int64_t at = oh * out_w + ow;
      _mm512_mask_storeu_ps(y + at, lanes, v);
      // Index = the first window's first element + 2 lane + offset, widened to 64 bits. (The
      // zero-masked forms: GCC 12 warns on the unmasked ones' undefined source operand.)
      const __m512i within = _mm512_add_epi32(twice_lane, offset);
      const __m512i start = _mm512_set1_epi64(2 * oh * w + 2 * ow);
      const __m512i low = _mm512_add_epi64(
          start,
          _mm512_maskz_cvtepi32_epi64(0xFF, _mm512_maskz_extracti64x4_epi64(0xF, within, 0)));
      const __m512i high = _mm512_add_epi64(
          start,
          _mm512_maskz_cvtepi32_epi64(0xFF, _mm512_maskz_extracti64x4_epi64(0xF, within, 1)));
      _mm512_mask_storeu_epi64(arg + at, static_cast<__mmask8>(lanes), low);
      _mm512_mask_storeu_epi64(arg + at + 8, static_cast<__mmask8>(lanes >> 8), high);
    }
  }
}

ECH_AVX512 bool max_pool_2x2_backward(const float* grad_out, const int64_t* arg, int64_t h,
                                      int64_t w, int64_t out_h, int64_t out_w, float* grad_in,
                                      const float* relu_out) {
  const __m512i twice_lane_low = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i twice_lane_high = _mm512_add_epi64(twice_lane_low, _mm512_set1_epi64(16));
  const __m512i top_right = _mm512_set1_epi64(1), bottom_left = _mm512_set1_epi64(w),
                bottom_right = _mm512_set1_epi64(w + 1), zero_index = _mm512_setzero_si512();
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < out_h; ++oh) {
    float* r0 = grad_in + 2 * oh * w;
    float* r1 = r0 + w;
    for (int64_t ow = 0; ow < out_w; ow += 16) {
      const int64_t count = out_w - ow < 16 ? out_w - ow : 16;
      const __mmask16 lanes = first(count);
      const int64_t at = oh * out_w + ow;
      // Each index's offset from its own window's first element.
      const __m512i start = _mm512_set1_epi64(2 * oh * w + 2 * ow);
      const __m512i low = _mm512_sub_epi64(
          _mm512_sub_epi64(_mm512_maskz_loadu_epi64(static_cast<__mmask8>(lanes), arg + at), start),
          twice_lane_low);
      const __m512i high = _mm512_sub_epi64(
          _mm512_sub_epi64(
              _mm512_maskz_loadu_epi64(static_cast<__mmask8>(lanes >> 8), arg + at + 8), start),
          twice_lane_high);
      const __mmask16 at_tl = lanes_at(lanes, low, high, zero_index),
                      at_tr = lanes_at(lanes, low, high, top_right),
                      at_bl = lanes_at(lanes, low, high, bottom_left),
                      at_br = lanes_at(lanes, low, high, bottom_right);
      if (static_cast<__mmask16>(at_tl | at_tr | at_bl | at_br) != lanes) return false;
      // 0 + g, as the twin's zero fill and add (a -0 gradient becomes +0); a masked g is 0.
      const __mmask16 passed =
          relu_out == nullptr
              ? lanes
              : _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, relu_out + at), zero,
                                        _CMP_GT_OQ);
      const __m512 g = _mm512_maskz_loadu_ps(passed, grad_out + at);
      store_pairs(r0 + 2 * ow, count, _mm512_maskz_add_ps(at_tl, zero, g),
                  _mm512_maskz_add_ps(at_tr, zero, g));
      store_pairs(r1 + 2 * ow, count, _mm512_maskz_add_ps(at_bl, zero, g),
                  _mm512_maskz_add_ps(at_br, zero, g));
    }
    for (int64_t iw = 2 * out_w; iw < w; ++iw) r0[iw] = r1[iw] = 0.0f;  // no window's column
  }
  for (int64_t i = 2 * out_h * w; i < h * w; ++i) grad_in[i] = 0.0f;  // no window's row
  return true;
}

}  // namespace echelon::cpu::fast::pool_avx512

#endif
