// Optimizer CPU twins: one plain loop per update rule.
#include <echelon/tensor/cpu/optim.h>

#include <cmath>

namespace echelon::cpu {

template <typename T>
void sgd_step(int64_t count, const SGDOptions& o, bool first_step, T* param, const T* grad,
              T* momentum_buf, const float* guard, const double* lr, T* ema) {
  if (guard && !std::isfinite(*guard)) return;
  const double rate = lr ? *lr : o.lr;
  for (int64_t i = 0; i < count; ++i) {
    double g = static_cast<double>(grad[i]) + o.weight_decay * static_cast<double>(param[i]);
    if (o.momentum != 0.0) {
      const double buf =
          first_step ? g
                     : o.momentum * static_cast<double>(momentum_buf[i]) + (1.0 - o.dampening) * g;
      momentum_buf[i] = static_cast<T>(buf);
      g = o.nesterov ? g + o.momentum * buf : buf;
    }
    param[i] = static_cast<T>(static_cast<double>(param[i]) - rate * g);
    if (ema)
      ema[i] = static_cast<T>(o.ema_decay * static_cast<double>(ema[i]) +
                              (1.0 - o.ema_decay) * static_cast<double>(param[i]));
  }
}

template void sgd_step<float>(int64_t, const SGDOptions&, bool, float*, const float*, float*,
                              const float*, const double*, float*);
template void sgd_step<double>(int64_t, const SGDOptions&, bool, double*, const double*, double*,
                               const float*, const double*, double*);

}  // namespace echelon::cpu
