#include <echelon/layers/loss.h>

#include <cmath>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon {

Tensor CrossEntropyLoss::operator()(const Tensor& logits, const Tensor& target) const {
  return cross_entropy(logits, target);
}

int64_t correct_count(const Tensor& logits, const Tensor& target) {
  ECH_CHECK(logits.dim() == 2 && target.dim() == 1 && logits.size(0) == target.size(0),
            "accuracy: expected logits (N, classes) and labels (N), got ", logits.shape(), " and ",
            target.shape());
  NoGradGuard no_grad;
  Tensor predicted = ops::argmax(logits, 1);
  Tensor labels = target.dtype() == kInt64 ? target : ops::cast(target, kInt64);
  return std::lround(ops::sum(ops::eq(predicted, labels)).item<float>());
}

double accuracy(const Tensor& logits, const Tensor& target) {
  const int64_t n = logits.dim() == 2 ? logits.size(0) : 0;
  const int64_t correct = correct_count(logits, target);
  return n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace echelon
