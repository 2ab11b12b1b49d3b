// Loss CPU twins: log-softmax with the row max subtracted (no overflow), double accumulation.
#include <echelon/tensor/cpu/loss.h>

#include <algorithm>
#include <cmath>

namespace echelon::cpu {

template <typename T>
int64_t cross_entropy_forward(int64_t n, int64_t classes, const T* logits, const int64_t* target,
                              T* log_probs, T* loss) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] < 0 || target[i] >= classes) return i;
    const T* row = logits + i * classes;
    const double row_max = static_cast<double>(*std::max_element(row, row + classes));
    double sum_exp = 0.0;
    for (int64_t j = 0; j < classes; ++j)
      sum_exp += std::exp(static_cast<double>(row[j]) - row_max);
    const double log_sum = row_max + std::log(sum_exp);
    for (int64_t j = 0; j < classes; ++j)
      log_probs[i * classes + j] = static_cast<T>(static_cast<double>(row[j]) - log_sum);
    total -= static_cast<double>(row[target[i]]) - log_sum;
  }
  loss[0] = static_cast<T>(total / static_cast<double>(n));
  return -1;
}

template <typename T>
void cross_entropy_backward(int64_t n, int64_t classes, const T* grad_loss, const T* log_probs,
                            const int64_t* target, T* grad_logits) {
  const double scale = static_cast<double>(grad_loss[0]) / static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < classes; ++j) {
      const double one_hot = target[i] == j ? 1.0 : 0.0;
      grad_logits[i * classes + j] = static_cast<T>(
          (std::exp(static_cast<double>(log_probs[i * classes + j])) - one_hot) * scale);
    }
}

template int64_t cross_entropy_forward<float>(int64_t, int64_t, const float*, const int64_t*,
                                              float*, float*);
template int64_t cross_entropy_forward<double>(int64_t, int64_t, const double*, const int64_t*,
                                               double*, double*);
template void cross_entropy_backward<float>(int64_t, int64_t, const float*, const float*,
                                            const int64_t*, float*);
template void cross_entropy_backward<double>(int64_t, int64_t, const double*, const double*,
                                             const int64_t*, double*);

}  // namespace echelon::cpu
