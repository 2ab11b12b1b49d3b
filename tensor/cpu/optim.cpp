// Optimizer CPU twins: one plain loop per update rule.
#include <echelon/tensor/cpu/optim.h>

namespace echelon::cpu {

template <typename T>
void sgd_step(int64_t count, const SgdArgs& a, T* param, const T* grad, T* momentum_buf) {
  for (int64_t i = 0; i < count; ++i) {
    double g = static_cast<double>(grad[i]) + a.weight_decay * static_cast<double>(param[i]);
    if (a.momentum != 0.0) {
      const double buf = a.first_step ? g
                                      : a.momentum * static_cast<double>(momentum_buf[i]) +
                                            (1.0 - a.dampening) * g;
      momentum_buf[i] = static_cast<T>(buf);
      g = a.nesterov ? g + a.momentum * buf : buf;
    }
    param[i] = static_cast<T>(static_cast<double>(param[i]) - a.lr * g);
  }
}

template void sgd_step<float>(int64_t, const SgdArgs&, float*, const float*, float*);
template void sgd_step<double>(int64_t, const SgdArgs&, double*, const double*, double*);

}  // namespace echelon::cpu
