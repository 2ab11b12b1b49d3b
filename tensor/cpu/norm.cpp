// Normalisation CPU twins: plain loops, double accumulation.
#include <echelon/tensor/cpu/norm.h>

#include <algorithm>
#include <cmath>

namespace echelon::cpu {

namespace {
inline int64_t at(const NormArgs& a, int64_t n, int64_t c, int64_t s) {
  return (n * a.c + c) * a.spatial + s;
}
}  // namespace

template <typename T>
void batch_norm_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                              T* running_mean, T* running_var, double momentum, double eps, T* y,
                              T* save_mean, T* save_invstd) {
  const double count = static_cast<double>(a.n * a.spatial);
  for (int64_t c = 0; c < a.c; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) sum += static_cast<double>(x[at(a, n, c, s)]);
    const double mean = sum / count;
    double squares = 0.0;  // two passes: no cancellation when |mean| >> std
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const double d = static_cast<double>(x[at(a, n, c, s)]) - mean;
        squares += d * d;
      }
    const double var = squares / count;
    const double invstd = 1.0 / std::sqrt(var + eps);
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0;
    const double b = beta ? static_cast<double>(beta[c]) : 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t i = at(a, n, c, s);
        y[i] = static_cast<T>((static_cast<double>(x[i]) - mean) * invstd * g + b);
      }
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
}

template <typename T>
void batch_norm_eval_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y) {
  for (int64_t c = 0; c < a.c; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + eps);
    const double mean = static_cast<double>(running_mean[c]);
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0;
    const double b = beta ? static_cast<double>(beta[c]) : 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t i = at(a, n, c, s);
        y[i] = static_cast<T>((static_cast<double>(x[i]) - mean) * invstd * g + b);
      }
  }
}

template <typename T>
void batch_norm_backward(const NormArgs& a, const T* grad_out, const T* x, const T* gamma,
                         const T* save_mean, const T* save_invstd, T* grad_in, T* grad_gamma,
                         T* grad_beta) {
  // With xhat = (x - mean) * invstd:  dx = g * invstd / M * (M * dy - sum(dy) - xhat * sum(dy *
  // xhat)).
  const double count = static_cast<double>(a.n * a.spatial);
  for (int64_t c = 0; c < a.c; ++c) {
    const double mean = static_cast<double>(save_mean[c]);
    const double invstd = static_cast<double>(save_invstd[c]);
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t i = at(a, n, c, s);
        const double dy = static_cast<double>(grad_out[i]);
        sum_dy += dy;
        sum_dy_xhat += dy * (static_cast<double>(x[i]) - mean) * invstd;
      }
    const double g = gamma ? static_cast<double>(gamma[c]) : 1.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t i = at(a, n, c, s);
        const double xhat = (static_cast<double>(x[i]) - mean) * invstd;
        const double dy = static_cast<double>(grad_out[i]);
        grad_in[i] =
            static_cast<T>(g * invstd / count * (count * dy - sum_dy - xhat * sum_dy_xhat));
      }
    if (grad_gamma) grad_gamma[c] = static_cast<T>(sum_dy_xhat);
    if (grad_beta) grad_beta[c] = static_cast<T>(sum_dy);
  }
}

template <typename T>
void lrn_forward(const NormArgs& a, int64_t size, double alpha, double beta, double k, const T* x,
                 T* y, T* scale) {
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t lo = std::max<int64_t>(c - size / 2, 0);
        const int64_t hi = std::min<int64_t>(c + (size - 1) / 2, a.c - 1);
        double squares = 0.0;
        for (int64_t j = lo; j <= hi; ++j) {
          const double v = static_cast<double>(x[at(a, n, j, s)]);
          squares += v * v;
        }
        const double sc = k + alpha / static_cast<double>(size) * squares;
        const int64_t i = at(a, n, c, s);
        scale[i] = static_cast<T>(sc);
        y[i] = static_cast<T>(static_cast<double>(x[i]) * std::pow(sc, -beta));
      }
}

template <typename T>
void lrn_backward(const NormArgs& a, int64_t size, double alpha, double beta, const T* grad_out,
                  const T* x, const T* y, const T* scale, T* grad_in) {
  // dx_j = g_j * scale_j^-beta - 2*alpha*beta/size * x_j * sum_{i: j in window(i)} g_i*y_i/scale_i,
  // and j is in window(i) exactly when i is in [j - (size-1)/2, j + size/2].
  const double coeff = 2.0 * alpha * beta / static_cast<double>(size);
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t s = 0; s < a.spatial; ++s) {
        const int64_t lo = std::max<int64_t>(c - (size - 1) / 2, 0);
        const int64_t hi = std::min<int64_t>(c + size / 2, a.c - 1);
        double acc = 0.0;
        for (int64_t i = lo; i <= hi; ++i) {
          const int64_t q = at(a, n, i, s);
          acc += static_cast<double>(grad_out[q]) * static_cast<double>(y[q]) /
                 static_cast<double>(scale[q]);
        }
        const int64_t j = at(a, n, c, s);
        grad_in[j] = static_cast<T>(static_cast<double>(grad_out[j]) *
                                        std::pow(static_cast<double>(scale[j]), -beta) -
                                    coeff * static_cast<double>(x[j]) * acc);
      }
}

template <typename T>
void dropout_mask(int64_t count, double p, PhiloxState state, T* out) {
  const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
  for (int64_t i = 0; i < count; ++i)
    out[i] = static_cast<double>(philox_uniform(state, static_cast<uint64_t>(i))) < p ? T(0) : keep;
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_NORM(T)                                                                    \
  template void batch_norm_train_forward<T>(const NormArgs&, const T*, const T*, const T*, T*, T*, \
                                            double, double, T*, T*, T*);                           \
  template void batch_norm_eval_forward<T>(const NormArgs&, const T*, const T*, const T*,          \
                                           const T*, const T*, double, T*);                        \
  template void batch_norm_backward<T>(const NormArgs&, const T*, const T*, const T*, const T*,    \
                                       const T*, T*, T*, T*);                                      \
  template void lrn_forward<T>(const NormArgs&, int64_t, double, double, double, const T*, T*,     \
                               T*);                                                                \
  template void lrn_backward<T>(const NormArgs&, int64_t, double, double, const T*, const T*,      \
                                const T*, const T*, T*);                                           \
  template void dropout_mask<T>(int64_t, double, PhiloxState, T*);
ECH_INSTANTIATE_NORM(float)
ECH_INSTANTIATE_NORM(double)
#undef ECH_INSTANTIATE_NORM
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu
