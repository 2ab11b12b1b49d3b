// Fast CPU max pooling (nn.h): the twin's rules per plane, planes split across the thread pool;
// the common 2x2, stride-2 window unrolled, vectorised (AVX2 or AVX-512, pool_avx512.h) for float.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/pool_avx512.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace echelon::cpu::fast {
namespace {

std::atomic<bool>& avx512_setting() {
#ifdef ECHELON_POOL_AVX512
  static std::atomic<bool> on{pool_avx512::cpu_has()};
#else
  static std::atomic<bool> on{false};
#endif
  return on;
}

// An element as the pooling sees it: with Relu, the ReLU twin's v > 0 ? v : +0 (NaN -> +0).
template <bool Relu, typename T>
inline T seen(T v) {
  return Relu ? (v > T(0) ? v : T(0)) : v;
}

// The max of one window [h0, h1) x [w0, w1) of `plane` (row length w) and its flat index: the
// first maximum, or the last NaN (the twin's rule: v > best || isnan(v)); of relu(plane) when
// Relu.
template <bool Relu, typename T>
inline void window_max(const T* plane, int64_t w, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                       T* value, int64_t* index) {
  int64_t best = h0 * w + w0;
  T best_v = seen<Relu>(plane[best]);
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) {
      const T v = seen<Relu>(plane[ih * w + iw]);
      if (v > best_v || std::isnan(v)) {
        best = ih * w + iw;
        best_v = v;
      }
    }
  *value = best_v;
  *index = best;
}

// The common 2x2, stride-2, unpadded window with every window inside the plane: the same rule,
// unrolled.
template <bool Relu, typename T>
void max_pool_2x2(const T* plane, int64_t w, int64_t out_h, int64_t out_w, T* y, int64_t* arg) {
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const T* r0 = plane + 2 * oh * w;
    const T* r1 = r0 + w;
    for (int64_t ow = 0; ow < out_w; ++ow) {
      int64_t best = 2 * oh * w + 2 * ow;
      T v = seen<Relu>(r0[2 * ow]);
      const T candidates[3] = {seen<Relu>(r0[2 * ow + 1]), seen<Relu>(r1[2 * ow]),
                               seen<Relu>(r1[2 * ow + 1])};
      const int64_t offsets[3] = {1, w, w + 1};
      const int64_t first = best;
      for (int k = 0; k < 3; ++k)
        if (candidates[k] > v || std::isnan(candidates[k])) {
          v = candidates[k];
          best = first + offsets[k];
        }
      y[oh * out_w + ow] = v;
      arg[oh * out_w + ow] = best;
    }
  }
}

#ifdef ECH_AVX2
ECH_AVX2 __m256i first_lanes(int64_t lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The even and odd elements of src[0, 2*count), count <= 8, in order; never reads past them.
ECH_AVX2 void load_pairs(const float* src, int64_t count, __m256* even, __m256* odd) {
  __m256 lo, hi;
  if (count == 8) {
    lo = _mm256_loadu_ps(src);
    hi = _mm256_loadu_ps(src + 8);
  } else {
    lo = _mm256_maskload_ps(src, first_lanes(std::min<int64_t>(8, 2 * count)));
    hi = _mm256_maskload_ps(src + 8, first_lanes(std::max<int64_t>(0, 2 * count - 8)));
  }
  // Per 128-bit half: (lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6); the 64-bit permute restores the order.
  *even = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
  *odd = _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

// v > 0 ? v : +0 per lane (NaN -> +0), the ReLU twin's rule.
ECH_AVX2 inline __m256 relu_lanes(__m256 v) {
  return _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ), v);
}

// max_pool_2x2 for float, 8 outputs at a time: blends instead of jumps (which element wins is
// data-dependent, so jumps mispredict: 12% of a LeNet-5 step), the same first-maximum / last-NaN
// rule; of relu(plane) when relu.
ECH_AVX2 void max_pool_2x2_avx2(const float* plane, int64_t w, int64_t out_h, int64_t out_w,
                                bool relu, float* y, int64_t* arg) {
  const int64_t offsets[4] = {0, 1, w, w + 1};  // of the window's 4 elements from its first
  for (int64_t oh = 0; oh < out_h; ++oh) {
    const float* r0 = plane + 2 * oh * w;
    const float* r1 = r0 + w;
    for (int64_t ow = 0; ow < out_w; ow += 8) {
      const int64_t count = std::min<int64_t>(8, out_w - ow);
      __m256 v, top_right, bottom_left, bottom_right;
      load_pairs(r0 + 2 * ow, count, &v, &top_right);
      load_pairs(r1 + 2 * ow, count, &bottom_left, &bottom_right);
      if (relu) {
        v = relu_lanes(v);
        top_right = relu_lanes(top_right);
        bottom_left = relu_lanes(bottom_left);
        bottom_right = relu_lanes(bottom_right);
      }
      __m256i which = _mm256_setzero_si256();
      const __m256 candidates[3] = {top_right, bottom_left, bottom_right};
      for (int k = 0; k < 3; ++k) {
        const __m256 c = candidates[k];
        const __m256 take =
            _mm256_or_ps(_mm256_cmp_ps(c, v, _CMP_GT_OQ), _mm256_cmp_ps(c, c, _CMP_UNORD_Q));
        v = _mm256_blendv_ps(v, c, take);
        which = _mm256_blendv_epi8(which, _mm256_set1_epi32(k + 1), _mm256_castps_si256(take));
      }
      alignas(32) int32_t winner[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(winner), which);
      _mm256_maskstore_ps(y + oh * out_w + ow, first_lanes(count), v);
      const int64_t first = 2 * oh * w + 2 * ow;
      for (int64_t lane = 0; lane < count; ++lane)
        arg[oh * out_w + ow + lane] = first + 2 * lane + offsets[winner[lane]];
    }
  }
}
#endif

// Whether the 2x2 plane loops may take their AVX-512 twins: float, the setting on, and every index
// of a plane fits the twins' 32-bit lanes.
template <typename T>
bool use_avx512(int64_t w) {
  return std::is_same_v<T, float> && avx512_setting().load(std::memory_order_relaxed) &&
         w < (int64_t{1} << 30);
}

template <bool Relu, typename T>
void max_pool_2x2_best(const T* plane, int64_t w, int64_t out_h, int64_t out_w, T* y,
                       int64_t* arg) {
  if constexpr (std::is_same_v<T, float>) {
#ifdef ECHELON_POOL_AVX512
    if (use_avx512<T>(w))
      return pool_avx512::max_pool_2x2_forward(plane, w, out_h, out_w, Relu, y, arg);
#endif
#ifdef ECH_AVX2
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2) return max_pool_2x2_avx2(plane, w, out_h, out_w, Relu, y, arg);
#endif
  }
  max_pool_2x2<Relu>(plane, w, out_h, out_w, y, arg);
}

}  // namespace

bool max_pool_avx512_available() {
#ifdef ECHELON_POOL_AVX512
  return pool_avx512::cpu_has();
#else
  return false;
#endif
}

void set_max_pool_avx512(bool on) {
  ECH_CHECK(!on || max_pool_avx512_available(), "set_max_pool_avx512: this CPU has no AVX-512");
  avx512_setting().store(on);
}

bool max_pool_avx512() {
  return avx512_setting().load();
}

namespace {

template <bool Relu, typename T>
void max_pool_planes(const Pool2dGeometry& a, const T* x, T* y, int64_t* argmax) {
  // Locals, not a's fields: the stores to y and argmax could alias them otherwise.
  const int64_t h = a.h, w = a.w, out_h = a.out_h, out_w = a.out_w;
  const int64_t kh = a.kernel_h, kw = a.kernel_w, sh = a.stride_h, sw = a.stride_w;
  const int64_t ph = a.pad_h, pw = a.pad_w;
  parallel_for(a.n * a.c, 16, [=](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* plane = x + p * h * w;
      T* y_plane = y + p * out_h * out_w;
      int64_t* arg_plane = argmax + p * out_h * out_w;
      if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * out_h <= h &&
          2 * out_w <= w) {
        max_pool_2x2_best<Relu>(plane, w, out_h, out_w, y_plane, arg_plane);
        continue;
      }
      for (int64_t oh = 0; oh < out_h; ++oh) {
        // The window clipped to the image (padding never wins a max, as in the twin).
        const int64_t h0 = std::max<int64_t>(oh * sh - ph, 0);
        const int64_t h1 = std::min(oh * sh - ph + kh, h);
        for (int64_t ow = 0; ow < out_w; ++ow) {
          const int64_t w0 = std::max<int64_t>(ow * sw - pw, 0);
          const int64_t w1 = std::min(ow * sw - pw + kw, w);
          window_max<Relu>(plane, w, h0, h1, w0, w1, &y_plane[oh * out_w + ow],
                           &arg_plane[oh * out_w + ow]);
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y, int64_t* argmax, bool relu) {
  if (relu)
    max_pool_planes<true>(a, x, y, argmax);
  else
    max_pool_planes<false>(a, x, y, argmax);
}

namespace {

// Both backwards: the one-pass 2x2 cells where they apply, else the twin's scatter, each index
// checked against its plane, or with in_windows against its own window of a.
template <typename T>
void max_pool_backward_planes(const Pool2dGeometry& a, const T* grad_out, const int64_t* argmax,
                              T* grad_in, const T* relu_out, bool in_windows) {
  const int64_t h = a.h, w = a.w, out_h = a.out_h, out_w = a.out_w;
  const int64_t in_plane = h * w, out_plane = out_h * out_w;
  // One pass per plane over disjoint 2x2 cells (pool_avx512.h) where they fit the plane, with
  // rows of 8 windows or more, so that a 16-lane step is half used at least: below that (LeNet-5's
  // second pooling, 4 windows a row) the scatter over an L1-resident plane is as fast. With
  // in_windows, only where each cell lies in its window (stride 2, no padding), so that an index
  // in its cell is in its window.
  [[maybe_unused]] const bool cells =
      2 * out_h <= h && 2 * out_w <= w && out_w >= 8 && use_avx512<T>(w) &&
      (!in_windows || (a.stride_h == 2 && a.stride_w == 2 && a.pad_h == 0 && a.pad_w == 0 &&
                       a.kernel_h >= 2 && a.kernel_w >= 2));
  parallel_for(a.n * a.c, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* g = grad_out + p * out_plane;
      const T* y = relu_out ? relu_out + p * out_plane : nullptr;
      const int64_t* arg = argmax + p * out_plane;
      T* plane = grad_in + p * in_plane;
#ifdef ECHELON_POOL_AVX512
      if constexpr (std::is_same_v<T, float>)
        if (cells && pool_avx512::max_pool_2x2_backward(g, arg, h, w, out_h, out_w, plane, y))
          continue;  // else an index left its cell: the scatter below rewrites the plane
#endif
      std::fill(plane, plane + in_plane, T(0));
      for (int64_t oh = 0, q = 0; oh < out_h; ++oh)
        for (int64_t ow = 0; ow < out_w; ++ow, ++q) {
          const int64_t idx = arg[q];
          ECH_CHECK(idx >= 0 && idx < in_plane, "max_pool2d_backward: argmax index ", idx,
                    " is outside the ", h, "x", w, " plane of input (", a.n, ", ", a.c, ", ", h,
                    ", ", w, ")");
          ECH_CHECK(!in_windows || a.window_holds(oh, ow, idx),
                    "max_pool2d_backward: argmax index ", idx, " of output (", p / a.c, ", ",
                    p % a.c, ", ", oh, ", ", ow, ") is outside its ", a.kernel_h, "x", a.kernel_w,
                    " window at row ", oh * a.stride_h - a.pad_h, ", column ",
                    ow * a.stride_w - a.pad_w, " of the ", h, "x", w, " input plane");
          if (y && !(y[q] > T(0))) continue;  // ReLU's backward: a zero term
          plane[idx] += g[q];
        }
    }
  });
}

}  // namespace

template <typename T>
void max_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, const int64_t* argmax,
                         T* grad_in) {
  max_pool_backward_planes(a, grad_out, argmax, grad_in, static_cast<const T*>(nullptr), false);
}

template <typename T>
void max_pool2d_backward_in_windows(const Pool2dGeometry& a, const T* grad_out,
                                    const int64_t* argmax, T* grad_in, const T* relu_out) {
  max_pool_backward_planes(a, grad_out, argmax, grad_in, relu_out, true);
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_FAST_POOL(T)                                                               \
  template void max_pool2d_forward<T>(const Pool2dGeometry&, const T*, T*, int64_t*, bool);        \
  template void max_pool2d_backward<T>(const Pool2dGeometry&, const T*, const int64_t*, T*);       \
  template void max_pool2d_backward_in_windows<T>(const Pool2dGeometry&, const T*, const int64_t*, \
                                                  T*, const T*);
ECH_INSTANTIATE_FAST_POOL(float)
ECH_INSTANTIATE_FAST_POOL(double)
#undef ECH_INSTANTIATE_FAST_POOL
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu::fast
