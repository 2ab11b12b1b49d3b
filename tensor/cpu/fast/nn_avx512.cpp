#include <echelon/tensor/cpu/fast/nn_avx512.h>

#ifdef ECHELON_NORM_AVX512

#include <immintrin.h>

#define ECH_AVX512 __attribute__((target("avx512f")))

namespace echelon::cpu::fast::norm_avx512 {
namespace {

// Lanes [0, count) of a 16-float vector, count clamped to [0, 16].
inline __mmask16 first(int64_t count) {
  if (count <= 0) return 0;
  if (count >= 16) return 0xFFFF;
  return static_cast<__mmask16>((1u << count) - 1u);
}

// nn.cpp's fold_lanes on lanes 0..15 (lo) and 16..31 (hi): lanes[i] += lanes[i + width] for
// width 16, 8, 4, 2, 1.
ECH_AVX512 inline float fold(__m512 lo, __m512 hi) {
  const __m512 v16 = _mm512_add_ps(lo, hi);
  // The zero-masked extracts: GCC 12 warns on the unmasked ones' undefined source operand.
  const __m512d halves = _mm512_castps_pd(v16);
  const __m256 v8 = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, halves, 0)),
                                  _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, halves, 1)));
  const __m128 v4 = _mm_add_ps(_mm256_castps256_ps128(v8), _mm256_extractf128_ps(v8, 1));
  const __m128 v2 = _mm_add_ps(v4, _mm_movehl_ps(v4, v4));
  return _mm_cvtss_f32(_mm_add_ss(v2, _mm_shuffle_ps(v2, v2, 1)));
}

// Where d comes from: dy (None); dy where out > 0 (Output); dy where in * scale + shift > 0
// (Input: the fused forward's ReLU input recomputed with its saved affine, the same product and
// add as normalize_plane, so the same signs as its y). Elsewhere +0 (NaN: 0, as the portable
// select).
enum class Mask { None, Output, Input };

// The per-plane constants of a mask recomputed from the input.
struct Affine {
  __m512 scale, shift;
};

// d of the 16 elements at s; x: in's 16 elements there (read only by Mask::Input), out read only
// by Mask::Output (may be null otherwise).
template <Mask M>
ECH_AVX512 inline __m512 masked_gradient(__mmask16 lanes, int64_t s, const float* dy,
                                         const float* out, __m512 x, const Affine& affine) {
  const __m512 g = _mm512_maskz_loadu_ps(lanes, dy + s);
  if constexpr (M == Mask::None) return g;
  const __m512 relu_in = M == Mask::Output
                             ? _mm512_maskz_loadu_ps(lanes, out + s)
                             : _mm512_add_ps(_mm512_mul_ps(x, affine.scale), affine.shift);
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(relu_in, _mm512_setzero_ps(), _CMP_GT_OQ), g);
}

// The 16 terms of pass 1 at s into the lane sums s1, s2 (only the lanes set in `lanes` change).
// masked is written only when Store (may be null otherwise).
template <Mask M, bool Store>
ECH_AVX512 inline void sums_step(__mmask16 lanes, int64_t s, const float* dy, const float* out,
                                 const float* in, __m512 mean, const Affine& affine, float* masked,
                                 __m512* s1, __m512* s2) {
  const __m512 x = _mm512_maskz_loadu_ps(lanes, in + s);
  const __m512 d = masked_gradient<M>(lanes, s, dy, out, x, affine);
  if constexpr (Store) _mm512_mask_storeu_ps(masked + s, lanes, d);
  const __m512 centred = _mm512_sub_ps(x, mean);
  *s1 = _mm512_mask_add_ps(*s1, lanes, *s1, d);
  *s2 = _mm512_mask_add_ps(*s2, lanes, *s2, _mm512_mul_ps(d, centred));
}

template <Mask M, bool Store>
ECH_AVX512 void sums(const float* dy, const float* out, const float* in, float mean,
                     const Affine& affine, int64_t spatial, float* masked, float* sum_dy,
                     float* sum_dy_xc) {
  const __m512 m = _mm512_set1_ps(mean);
  __m512 s1_lo = _mm512_setzero_ps(), s1_hi = s1_lo, s2_lo = s1_lo, s2_hi = s1_lo;
  int64_t s = 0;
  for (; s + 32 <= spatial; s += 32) {
    sums_step<M, Store>(0xFFFF, s, dy, out, in, m, affine, masked, &s1_lo, &s2_lo);
    sums_step<M, Store>(0xFFFF, s + 16, dy, out, in, m, affine, masked, &s1_hi, &s2_hi);
  }
  if (s < spatial) {  // the tail: lanes 0, 1, ... as the portable loop
    const int64_t tail = spatial - s;
    sums_step<M, Store>(first(tail), s, dy, out, in, m, affine, masked, &s1_lo, &s2_lo);
    if (tail > 16)
      sums_step<M, Store>(first(tail - 16), s + 16, dy, out, in, m, affine, masked, &s1_hi, &s2_hi);
  }
  *sum_dy = fold(s1_lo, s1_hi);
  *sum_dy_xc = fold(s2_lo, s2_hi);
}

template <bool Relu, bool Residual>
ECH_AVX512 void normalize_plane(const float* in, const float* residual, float scale, float shift,
                                int64_t spatial, float* y) {
  const __m512 a = _mm512_set1_ps(scale), b = _mm512_set1_ps(shift);
  for (int64_t s = 0; s < spatial; s += 16) {
    const __mmask16 lanes = first(spatial - s);
    __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, in + s), a), b);
    if constexpr (Residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(lanes, residual + s));
    if constexpr (Relu)  // v > 0 ? v : +0, NaN -> 0, as the ReLU twin
      v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
    _mm512_mask_storeu_ps(y + s, lanes, v);
  }
}

// Where d comes from: the stored masked gradient (Stored), else as masked_gradient<M>.
template <Mask M, bool Stored>
ECH_AVX512 void apply_plane(const float* masked, const float* dy, const float* out, const float* in,
                            const Affine& affine, float mean, float k, float kx, float k0,
                            int64_t spatial, float* grad_in) {
  const __m512 m = _mm512_set1_ps(mean), vk = _mm512_set1_ps(k), vkx = _mm512_set1_ps(kx),
               vk0 = _mm512_set1_ps(k0);
  for (int64_t s = 0; s < spatial; s += 16) {
    const __mmask16 lanes = first(spatial - s);
    const __m512 x = _mm512_maskz_loadu_ps(lanes, in + s);
    const __m512 d = Stored ? _mm512_maskz_loadu_ps(lanes, masked + s)
                            : masked_gradient<M>(lanes, s, dy, out, x, affine);
    const __m512 centred = _mm512_sub_ps(x, m);
    const __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(vk, d), _mm512_mul_ps(vkx, centred)),
                                   vk0);  // (k d + kx (x - mean)) + k0, as the portable loop
    _mm512_mask_storeu_ps(grad_in + s, lanes, v);
  }
}

ECH_AVX512 Affine affine_of(float scale, float shift) {
  return {_mm512_set1_ps(scale), _mm512_set1_ps(shift)};
}

}  // namespace

bool cpu_has() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

ECH_AVX512 float plane_sum(const float* plane, int64_t spatial) {
  __m512 lo = _mm512_setzero_ps(), hi = lo;
  int64_t s = 0;
  for (; s + 32 <= spatial; s += 32) {
    lo = _mm512_add_ps(lo, _mm512_loadu_ps(plane + s));
    hi = _mm512_add_ps(hi, _mm512_loadu_ps(plane + s + 16));
  }
  if (s < spatial) {  // the tail: lanes 0, 1, ... as the portable loop
    const __mmask16 l = first(spatial - s);
    lo = _mm512_mask_add_ps(lo, l, lo, _mm512_maskz_loadu_ps(l, plane + s));
    if (spatial - s > 16) {
      const __mmask16 h = first(spatial - s - 16);
      hi = _mm512_mask_add_ps(hi, h, hi, _mm512_maskz_loadu_ps(h, plane + s + 16));
    }
  }
  return fold(lo, hi);
}

ECH_AVX512 float plane_squares(const float* plane, int64_t spatial, float m) {
  const __m512 mean = _mm512_set1_ps(m);
  __m512 lo = _mm512_setzero_ps(), hi = lo;
  int64_t s = 0;
  for (; s + 32 <= spatial; s += 32) {
    const __m512 a = _mm512_sub_ps(_mm512_loadu_ps(plane + s), mean);
    const __m512 b = _mm512_sub_ps(_mm512_loadu_ps(plane + s + 16), mean);
    lo = _mm512_add_ps(lo, _mm512_mul_ps(a, a));
    hi = _mm512_add_ps(hi, _mm512_mul_ps(b, b));
  }
  if (s < spatial) {
    const __mmask16 l = first(spatial - s);
    const __m512 a = _mm512_sub_ps(_mm512_maskz_loadu_ps(l, plane + s), mean);
    lo = _mm512_mask_add_ps(lo, l, lo, _mm512_mul_ps(a, a));
    if (spatial - s > 16) {
      const __mmask16 h = first(spatial - s - 16);
      const __m512 b = _mm512_sub_ps(_mm512_maskz_loadu_ps(h, plane + s + 16), mean);
      hi = _mm512_mask_add_ps(hi, h, hi, _mm512_mul_ps(b, b));
    }
  }
  return fold(lo, hi);
}

ECH_AVX512 void plane_sums(bool relu, const float* dy, const float* out, const float* in,
                           float mean, int64_t spatial, float* masked, float* sum_dy,
                           float* sum_dy_xc) {
  const Affine none = affine_of(0.0f, 0.0f);
  if (relu && masked)
    sums<Mask::Output, true>(dy, out, in, mean, none, spatial, masked, sum_dy, sum_dy_xc);
  else if (relu)
    sums<Mask::Output, false>(dy, out, in, mean, none, spatial, nullptr, sum_dy, sum_dy_xc);
  else if (masked)
    sums<Mask::None, true>(dy, nullptr, in, mean, none, spatial, masked, sum_dy, sum_dy_xc);
  else
    sums<Mask::None, false>(dy, nullptr, in, mean, none, spatial, nullptr, sum_dy, sum_dy_xc);
}

ECH_AVX512 void plane_sums_relu_of_input(const float* dy, const float* in, float scale, float shift,
                                         float mean, int64_t spatial, float* sum_dy,
                                         float* sum_dy_xc) {
  sums<Mask::Input, false>(dy, nullptr, in, mean, affine_of(scale, shift), spatial, nullptr, sum_dy,
                           sum_dy_xc);
}

void normalize(const float* in, const float* residual, float scale, float shift, bool relu,
               int64_t spatial, float* y) {
  if (relu && residual)
    normalize_plane<true, true>(in, residual, scale, shift, spatial, y);
  else if (relu)
    normalize_plane<true, false>(in, nullptr, scale, shift, spatial, y);
  else if (residual)
    normalize_plane<false, true>(in, residual, scale, shift, spatial, y);
  else
    normalize_plane<false, false>(in, nullptr, scale, shift, spatial, y);
}

ECH_AVX512 void apply_gradient(const float* masked, const float* dy, const float* out, bool relu,
                               const float* in, float mean, float k, float kx, float k0,
                               int64_t spatial, float* grad_in) {
  const Affine none = affine_of(0.0f, 0.0f);
  if (masked)
    apply_plane<Mask::None, true>(masked, nullptr, nullptr, in, none, mean, k, kx, k0, spatial,
                                  grad_in);
  else if (relu)
    apply_plane<Mask::Output, false>(nullptr, dy, out, in, none, mean, k, kx, k0, spatial, grad_in);
  else
    apply_plane<Mask::None, false>(nullptr, dy, nullptr, in, none, mean, k, kx, k0, spatial,
                                   grad_in);
}

ECH_AVX512 void apply_gradient_relu_of_input(const float* dy, const float* in, float scale,
                                             float shift, float mean, float k, float kx, float k0,
                                             int64_t spatial, float* grad_in) {
  apply_plane<Mask::Input, false>(nullptr, dy, nullptr, in, affine_of(scale, shift), mean, k, kx,
                                  k0, spatial, grad_in);
}

}  // namespace echelon::cpu::fast::norm_avx512

#endif
