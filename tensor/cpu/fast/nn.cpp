#include <echelon/tensor/cpu/fast/nn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/nn_avx512.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

namespace echelon::cpu::fast {
namespace {

// Sums over a plane in kSumLanes independent partial sums: one accumulator is one chain of
// dependent vector adds, slower than the plane streams in from memory; 32 lanes keep 8 SSE (4
// AVX) chains in flight. Lane i takes the terms s = i mod 32 (the tail's terms go to lanes 0, 1,
// ...), then the lanes are added in a fixed tree: one order on every CPU and thread count.
constexpr int64_t kSumLanes = 32;

// Calls body(s, lane) for s in [0, n), lane = the partial sum s goes to.
template <typename Body>
inline void for_lanes(int64_t n, Body body) {
  const int64_t whole = n / kSumLanes * kSumLanes;
  for (int64_t s0 = 0; s0 < whole; s0 += kSumLanes) {
#pragma omp simd
    for (int64_t i = 0; i < kSumLanes; ++i) body(s0 + i, i);
  }
  for (int64_t s = whole; s < n; ++s) body(s, s - whole);
}

template <typename T>
inline T fold_lanes(T* lanes) {
  for (int64_t width = kSumLanes / 2; width > 0; width /= 2)
    for (int64_t i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}

std::atomic<bool>& avx512_setting() {
#ifdef ECHELON_NORM_AVX512
  static std::atomic<bool> on{norm_avx512::cpu_has()};
#else
  static std::atomic<bool> on{false};
#endif
  return on;
}

// Whether T's per-plane loops take their AVX-512 twins (nn_avx512.h: float only, same bits).
template <typename T>
bool use_avx512() {
  return std::is_same_v<T, float> && avx512_setting().load(std::memory_order_relaxed);
}

// The mean and the sum of squared deviations (M2) of one plane: its sum in T, vectorised; then,
// while it sits in L1, its squared deviations from its mean (no cancellation when |mean| >> std).
template <typename T>
void plane_moments(const T* plane, int64_t spatial, double* mean, double* m2) {
  const double plane_count = static_cast<double>(spatial);
  T sum = 0, squares = 0;
  bool done = false;
#ifdef ECHELON_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (use_avx512<T>()) {
      sum = norm_avx512::plane_sum(plane, spatial);
      squares = norm_avx512::plane_squares(plane, spatial,
                                           static_cast<T>(static_cast<double>(sum) / plane_count));
      done = true;
    }
#endif
  if (!done) {
    T lanes[kSumLanes] = {};
    for_lanes(spatial, [&](int64_t s, int64_t i) { lanes[i] += plane[s]; });
    sum = fold_lanes(lanes);
    const T m = static_cast<T>(static_cast<double>(sum) / plane_count);
    std::fill(lanes, lanes + kSumLanes, T(0));
    for_lanes(spatial, [&](int64_t s, int64_t i) { lanes[i] += (plane[s] - m) * (plane[s] - m); });
    squares = fold_lanes(lanes);
  }
  const double plane_mean = static_cast<double>(sum) / plane_count;
  const T m = static_cast<T>(plane_mean);
  // Deviations were taken from m, the mean rounded to T: sum (v - m)^2 = M2 + count * (mean -
  // m)^2.
  const double rounding = plane_mean - static_cast<double>(m);
  *mean = plane_mean;
  *m2 = static_cast<double>(squares) - plane_count * rounding * rounding;
}

// Channel c's mean and M2 from its planes' (plane n at moments[2 (n C + c)]), merged in double in
// image order by Chan et al.'s pairwise update (exact algebra, so as robust as two passes over the
// whole channel).
inline void merge_moments(const NormArgs& a, const double* moments, int64_t c, double* mean,
                          double* m2) {
  const double plane_count = static_cast<double>(a.spatial);
  double merged_mean = 0.0, merged_m2 = 0.0, merged_count = 0.0;
  for (int64_t n = 0; n < a.n; ++n) {
    const double plane_mean = moments[2 * (n * a.c + c)];
    const double plane_m2 = moments[2 * (n * a.c + c) + 1];
    const double count = merged_count + plane_count;
    const double delta = plane_mean - merged_mean;
    merged_mean += delta * (plane_count / count);
    merged_m2 += plane_m2 + delta * delta * (merged_count * plane_count / count);
    merged_count = count;
  }
  *mean = merged_mean;
  *m2 = std::max(merged_m2, 0.0);
}

// Planes per task: enough work per task to be worth a thread.
int64_t plane_grain(const NormArgs& a) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(a.spatial, 1));
}

// The batch-norm forward, with the ReLU applied in the same store pass when Relu, after adding
// the residual when it is not null. Both passes walk the planes in memory order, so the hardware
// prefetcher streams them (a channel's planes, C planes apart, restart it at every plane: at
// ResNet-20's 8x8 stage a plane is 4 cache lines). Per-plane results are merged per channel in
// image order: the same sums as a channel-by-channel walk, on any thread count. The per-channel
// scale and shift go to save_affine (C, 2) when it is not null.
template <bool Relu, typename T>
void train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta, T* running_mean,
                   T* running_var, double momentum, double eps, T* y, T* save_mean, T* save_invstd,
                   const T* residual, T* save_affine) {
  const int64_t planes = a.n * a.c;
  double* moments = scratch<double>(0, static_cast<size_t>(2 * planes));  // (N, C, 2)
  // (C, 2): scale, shift
  T* affine = save_affine ? save_affine : scratch<T>(1, static_cast<size_t>(2 * a.c));
  parallel_for(planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      plane_moments(x + p * a.spatial, a.spatial, &moments[2 * p], &moments[2 * p + 1]);
  });
  const double count = static_cast<double>(a.n * a.spatial);
  for (int64_t c = 0; c < a.c; ++c) {
    double mean = 0.0, squares = 0.0;  // squares: sum over the channel of (x - mean)^2
    merge_moments(a, moments, c, &mean, &squares);
    const double invstd = 1.0 / std::sqrt(squares / count + eps);
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0;
    const double b = beta ? static_cast<double>(beta[c]) : 0.0;
    affine[2 * c] = static_cast<T>(invstd * g);
    affine[2 * c + 1] = static_cast<T>(b - mean * invstd * g);
    save_mean[c] = static_cast<T>(mean);
    save_invstd[c] = static_cast<T>(invstd);
    if (running_mean) {
      const double unbiased = squares / (count - 1.0);
      running_mean[c] =
          static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
      running_var[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[c]) +
                                      momentum * unbiased);
    }
  }
  parallel_for(planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % a.c;
      const T scale = affine[2 * c], shift = affine[2 * c + 1];
      const T* in = x + p * a.spatial;
      T* out = y + p * a.spatial;
#ifdef ECHELON_NORM_AVX512
      if constexpr (std::is_same_v<T, float>)
        if (use_avx512<T>()) {
          norm_avx512::normalize(in, residual ? residual + p * a.spatial : nullptr, scale, shift,
                                 Relu, a.spatial, out);
          continue;
        }
#endif
      if (residual) {
        const T* res = residual + p * a.spatial;
#pragma omp simd
        for (int64_t s = 0; s < a.spatial; ++s) {
          const T v = in[s] * scale + shift + res[s];  // (bn + residual), as the composition
          out[s] = Relu ? (v > T(0) ? v : T(0)) : v;
        }
        continue;
      }
#pragma omp simd
      for (int64_t s = 0; s < a.spatial; ++s) {
        const T v = in[s] * scale + shift;
        out[s] = Relu ? (v > T(0) ? v : T(0)) : v;  // the ReLU twin's formula
      }
    }
  });
}

// Pass 1 of the backward over one plane: the sums of d and d * (x - mean), d = dy, or with Relu
// d = dy * (y > 0), stored in masked when Store.
template <bool Relu, bool Store, typename T>
void plane_sums(const T* dy, const T* out, const T* in, T mean, int64_t spatial, T* masked,
                double* sum_dy, double* sum_dy_xc) {
#ifdef ECHELON_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (use_avx512<T>()) {
      float d = 0.0f, dx = 0.0f;
      norm_avx512::plane_sums(Relu, dy, out, in, mean, spatial, Store ? masked : nullptr, &d, &dx);
      *sum_dy = static_cast<double>(d);
      *sum_dy_xc = static_cast<double>(dx);
      return;
    }
#endif
  T s1[kSumLanes] = {}, s2[kSumLanes] = {};
  for_lanes(spatial, [&](int64_t s, int64_t i) {
    const T g = dy[s];  // loaded unconditionally: the select below vectorises
    const T d = Relu ? (out[s] > T(0) ? g : T(0)) : g;
    if constexpr (Store) masked[s] = d;
    s1[i] += d;
    s2[i] += d * (in[s] - mean);
  });
  *sum_dy = static_cast<double>(fold_lanes(s1));
  *sum_dy_xc = static_cast<double>(fold_lanes(s2));
}

// Pass 1 over one plane with d = dy where in * scale + shift > 0 (the fused forward's ReLU input,
// recomputed: the same product and add as its store pass) and 0 elsewhere.
template <typename T>
void plane_sums_relu_of_input(const T* dy, const T* in, T scale, T shift, T mean, int64_t spatial,
                              double* sum_dy, double* sum_dy_xc) {
#ifdef ECHELON_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (use_avx512<T>()) {
      float d = 0.0f, dx = 0.0f;
      norm_avx512::plane_sums_relu_of_input(dy, in, scale, shift, mean, spatial, &d, &dx);
      *sum_dy = static_cast<double>(d);
      *sum_dy_xc = static_cast<double>(dx);
      return;
    }
#endif
  T s1[kSumLanes] = {}, s2[kSumLanes] = {};
  for_lanes(spatial, [&](int64_t s, int64_t i) {
    const T g = dy[s];
    const T d = in[s] * scale + shift > T(0) ? g : T(0);
    s1[i] += d;
    s2[i] += d * (in[s] - mean);
  });
  *sum_dy = static_cast<double>(fold_lanes(s1));
  *sum_dy_xc = static_cast<double>(fold_lanes(s2));
}

// Pass 2 over one plane with d as plane_sums_relu_of_input's.
template <typename T>
void apply_relu_of_input(const T* dy, const T* in, T scale, T shift, T mean, T k, T kx, T k0,
                         int64_t spatial, T* grad_in) {
#ifdef ECHELON_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (use_avx512<T>()) {
      norm_avx512::apply_gradient_relu_of_input(dy, in, scale, shift, mean, k, kx, k0, spatial,
                                                grad_in);
      return;
    }
#endif
#pragma omp simd
  for (int64_t s = 0; s < spatial; ++s) {
    const T g = dy[s];
    const T d = in[s] * scale + shift > T(0) ? g : T(0);
    grad_in[s] = k * d + kx * (in[s] - mean) + k0;
  }
}

// The batch-norm backward of grad_out, or with Relu of grad_out * (y > 0) (the ReLU's backward:
// y > 0 exactly where the ReLU's input was). The masked gradient is materialised only when
// `masked` is not null; the second pass then reads it instead of grad_out and y (one stream
// fewer). Planes in memory order, per-plane sums added per channel in image order, as the
// forward.
// With relu_affine (C, 2), the forward's scale and shift (Relu, no residual, masked null), the
// mask is recomputed from x instead of read from y: x * scale + shift is the forward's ReLU input
// (the same product and add, so the same signs), and each pass reads one stream fewer.
template <bool Relu, typename T>
void train_backward(const NormArgs& a, const T* grad_out, const T* y, const T* x, const T* gamma,
                    const T* save_mean, const T* save_invstd, T* grad_in, T* grad_gamma,
                    T* grad_beta, T* masked, const T* relu_affine) {
  const int64_t planes = a.n * a.c;
  double* sums = scratch<double>(0, static_cast<size_t>(2 * planes));  // (N, C, 2)
  T* coefficients = scratch<T>(1, static_cast<size_t>(3 * a.c));       // (C, 3): k, kx, k0
  parallel_for(planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t at = p * a.spatial;
      const T mean = save_mean[p % a.c];
      if (Relu && relu_affine)
        plane_sums_relu_of_input(grad_out + at, x + at, relu_affine[2 * (p % a.c)],
                                 relu_affine[2 * (p % a.c) + 1], mean, a.spatial, &sums[2 * p],
                                 &sums[2 * p + 1]);
      else if (Relu && masked)
        plane_sums<true, true>(grad_out + at, y + at, x + at, mean, a.spatial, masked + at,
                               &sums[2 * p], &sums[2 * p + 1]);
      else
        plane_sums<Relu, false>(grad_out + at, Relu ? y + at : nullptr, x + at, mean, a.spatial,
                                static_cast<T*>(nullptr), &sums[2 * p], &sums[2 * p + 1]);
    }
  });
  const double count = static_cast<double>(a.n * a.spatial);
  for (int64_t c = 0; c < a.c; ++c) {
    double sum_dy = 0.0, sum_dy_xc = 0.0;  // sum(dy), sum(dy * (x - mean))
    for (int64_t n = 0; n < a.n; ++n) {
      sum_dy += sums[2 * (n * a.c + c)];
      sum_dy_xc += sums[2 * (n * a.c + c) + 1];
    }
    const double invstd = static_cast<double>(save_invstd[c]);
    const double sum_dy_xhat = sum_dy_xc * invstd;
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0;
    // dx = g*invstd*(dy - sum_dy/M - (x - mean)*invstd*sum_dy_xhat/M) = k*dy + kx*(x-mean) + k0
    coefficients[3 * c] = static_cast<T>(g * invstd);
    coefficients[3 * c + 1] = static_cast<T>(-g * invstd * invstd * sum_dy_xhat / count);
    coefficients[3 * c + 2] = static_cast<T>(-g * invstd * sum_dy / count);
    if (grad_gamma) grad_gamma[c] = static_cast<T>(sum_dy_xhat);
    if (grad_beta) grad_beta[c] = static_cast<T>(sum_dy);
  }
  parallel_for(planes, plane_grain(a), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c = p % a.c, at = p * a.spatial;
      const T k = coefficients[3 * c], kx = coefficients[3 * c + 1], k0 = coefficients[3 * c + 2];
      const T mean = save_mean[c];
      const T* in = x + at;
      T* out = grad_in + at;
      if (Relu && relu_affine) {
        apply_relu_of_input(grad_out + at, in, relu_affine[2 * c], relu_affine[2 * c + 1], mean, k,
                            kx, k0, a.spatial, out);
        continue;
      }
#ifdef ECHELON_NORM_AVX512
      if constexpr (std::is_same_v<T, float>)
        if (use_avx512<T>()) {
          norm_avx512::apply_gradient(masked ? masked + at : nullptr, grad_out + at,
                                      Relu ? y + at : nullptr, Relu, in, mean, k, kx, k0, a.spatial,
                                      out);
          continue;
        }
#endif
      if (masked) {  // d stored by pass 1
        const T* d = masked + at;
#pragma omp simd
        for (int64_t s = 0; s < a.spatial; ++s) out[s] = k * d[s] + kx * (in[s] - mean) + k0;
        continue;
      }
      const T* dy = grad_out + at;
      const T* relu_out = Relu ? y + at : nullptr;
#pragma omp simd
      for (int64_t s = 0; s < a.spatial; ++s) {
        const T g = dy[s];
        const T d = Relu ? (relu_out[s] > T(0) ? g : T(0)) : g;
        out[s] = k * d + kx * (in[s] - mean) + k0;
      }
    }
  });
}

}  // namespace

bool batch_norm_avx512_available() {
#ifdef ECHELON_NORM_AVX512
  return norm_avx512::cpu_has();
#else
  return false;
#endif
}

void set_batch_norm_avx512(bool on) {
  ECH_CHECK(!on || batch_norm_avx512_available(), "set_batch_norm_avx512: this CPU has no AVX-512");
  avx512_setting().store(on);
}

bool batch_norm_avx512() {
  return avx512_setting().load();
}

template <typename T>
void batch_norm_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                              T* running_mean, T* running_var, double momentum, double eps, T* y,
                              T* save_mean, T* save_invstd) {
  train_forward<false>(a, x, gamma, beta, running_mean, running_var, momentum, eps, y, save_mean,
                       save_invstd, static_cast<const T*>(nullptr), static_cast<T*>(nullptr));
}

template <typename T>
void batch_norm_relu_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                                   T* running_mean, T* running_var, double momentum, double eps,
                                   T* y, T* save_mean, T* save_invstd, const T* residual,
                                   T* save_affine) {
  train_forward<true>(a, x, gamma, beta, running_mean, running_var, momentum, eps, y, save_mean,
                      save_invstd, residual, save_affine);
}

template <typename T>
void batch_norm_backward(const NormArgs& a, const T* grad_out, const T* x, const T* gamma,
                         const T* save_mean, const T* save_invstd, T* grad_in, T* grad_gamma,
                         T* grad_beta) {
  train_backward<false>(a, grad_out, static_cast<const T*>(nullptr), x, gamma, save_mean,
                        save_invstd, grad_in, grad_gamma, grad_beta, static_cast<T*>(nullptr),
                        static_cast<const T*>(nullptr));
}

template <typename T>
void batch_norm_relu_backward(const NormArgs& a, const T* grad_out, const T* y, const T* x,
                              const T* gamma, const T* save_mean, const T* save_invstd, T* grad_in,
                              T* grad_gamma, T* grad_beta, T* masked, const T* relu_affine) {
  ECH_CHECK(!(masked && relu_affine),
            "batch_norm_relu_backward: the mask is recomputed from x "
            "only when the masked gradient is not stored");
  train_backward<true>(a, grad_out, y, x, gamma, save_mean, save_invstd, grad_in, grad_gamma,
                       grad_beta, masked, relu_affine);
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_FAST_NN(T)                                                                 \
  template void batch_norm_train_forward<T>(const NormArgs&, const T*, const T*, const T*, T*, T*, \
                                            double, double, T*, T*, T*);                           \
  template void batch_norm_relu_train_forward<T>(const NormArgs&, const T*, const T*, const T*,    \
                                                 T*, T*, double, double, T*, T*, T*, const T*,     \
                                                 T*);                                              \
  template void batch_norm_backward<T>(const NormArgs&, const T*, const T*, const T*, const T*,    \
                                       const T*, T*, T*, T*);                                      \
  template void batch_norm_relu_backward<T>(const NormArgs&, const T*, const T*, const T*,         \
                                            const T*, const T*, const T*, T*, T*, T*, T*,          \
                                            const T*);
ECH_INSTANTIATE_FAST_NN(float)
ECH_INSTANTIATE_FAST_NN(double)
#undef ECH_INSTANTIATE_FAST_NN
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu::fast
