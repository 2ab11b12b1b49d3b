#include <echelon/tensor/cpu/fast/optim.h>

#include <atomic>
#include <cmath>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/parallel.h>

#if defined(__x86_64__)
#define ECH_SGD_AVX512 __attribute__((target("avx512f")))
#endif

namespace echelon::cpu::fast {
namespace {

constexpr int64_t kGrain = 1 << 15;  // elements per thread-pool chunk

// The update's variants, decided once per call (the twin tests them per element).
enum class Update { Plain, FirstMomentum, Momentum, FirstNesterov, Nesterov };

struct Step {
  Update update;
  double rate, weight_decay, momentum, keep;  // keep = 1 - dampening
  double ema_decay;                           // used where the call has an average
};

// Elements [begin, end) of the update, in the twin's operation order. Inlined into each ISA's
// loop below, where the compiler vectorises it.
template <typename T>
inline __attribute__((always_inline)) void update_range(const Step& s, T* param, const T* grad,
                                                        T* buf, int64_t begin, int64_t end) {
  switch (s.update) {
    case Update::Plain:
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const double g =
            static_cast<double>(grad[i]) + s.weight_decay * static_cast<double>(param[i]);
        param[i] = static_cast<T>(static_cast<double>(param[i]) - s.rate * g);
      }
      return;
    case Update::FirstMomentum:
    case Update::FirstNesterov: {
      const bool nesterov = s.update == Update::FirstNesterov;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const double g =
            static_cast<double>(grad[i]) + s.weight_decay * static_cast<double>(param[i]);
        buf[i] = static_cast<T>(g);
        const double d = nesterov ? g + s.momentum * g : g;
        param[i] = static_cast<T>(static_cast<double>(param[i]) - s.rate * d);
      }
      return;
    }
    case Update::Momentum:
    case Update::Nesterov: {
      const bool nesterov = s.update == Update::Nesterov;
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const double g =
            static_cast<double>(grad[i]) + s.weight_decay * static_cast<double>(param[i]);
        const double b = s.momentum * static_cast<double>(buf[i]) + s.keep * g;
        buf[i] = static_cast<T>(b);
        const double d = nesterov ? g + s.momentum * b : b;
        param[i] = static_cast<T>(static_cast<double>(param[i]) - s.rate * d);
      }
      return;
    }
  }
}

// The moving average of the elements [begin, end) just updated (still in cache).
template <typename T>
inline __attribute__((always_inline)) void average_range(const Step& s, const T* param, T* ema,
                                                         int64_t begin, int64_t end) {
  const double fresh = 1.0 - s.ema_decay;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i)
    ema[i] = static_cast<T>(s.ema_decay * static_cast<double>(ema[i]) +
                            fresh * static_cast<double>(param[i]));
}

template <typename T>
void update_portable(const Step& s, T* param, const T* grad, T* buf, T* ema, int64_t begin,
                     int64_t end) {
  update_range(s, param, grad, buf, begin, end);
  if (ema) average_range(s, param, ema, begin, end);
}

#ifdef ECH_SGD_AVX512
template <typename T>
ECH_SGD_AVX512 void update_avx512(const Step& s, T* param, const T* grad, T* buf, T* ema,
                                  int64_t begin, int64_t end) {
  update_range(s, param, grad, buf, begin, end);
  if (ema) average_range(s, param, ema, begin, end);
}
#endif

Update update_of(const SGDOptions& o, bool first_step) {
  if (o.momentum == 0.0) return Update::Plain;
  if (first_step) return o.nesterov ? Update::FirstNesterov : Update::FirstMomentum;
  return o.nesterov ? Update::Nesterov : Update::Momentum;
}

std::atomic<bool>& avx512_on() {
  static std::atomic<bool> on{sgd_avx512_available()};
  return on;
}

}  // namespace

bool sgd_avx512_available() {
#ifdef ECH_SGD_AVX512
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

void set_sgd_avx512(bool on) {
  ECH_CHECK(!on || sgd_avx512_available(), "set_sgd_avx512: this CPU has no AVX-512F");
  avx512_on() = on;
}

bool sgd_avx512() {
  return avx512_on();
}

template <typename T>
void sgd_step(int64_t count, const SGDOptions& o, bool first_step, T* param, const T* grad,
              T* momentum_buf, const float* guard, const double* lr, T* ema) {
  if (guard && !std::isfinite(*guard)) return;
  const Step s{update_of(o, first_step), lr ? *lr : o.lr, o.weight_decay, o.momentum,
               1.0 - o.dampening,        o.ema_decay};
  auto* update = &update_portable<T>;
#ifdef ECH_SGD_AVX512
  if (sgd_avx512()) update = &update_avx512<T>;
#endif
  parallel_for(count, kGrain, [&](int64_t begin, int64_t end) {
    update(s, param, grad, momentum_buf, ema, begin, end);
  });
}

template void sgd_step<float>(int64_t, const SGDOptions&, bool, float*, const float*, float*,
                              const float*, const double*, float*);
template void sgd_step<double>(int64_t, const SGDOptions&, bool, double*, const double*, double*,
                               const float*, const double*, double*);

}  // namespace echelon::cpu::fast
