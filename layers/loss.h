// Losses and metrics over class scores (N, classes) and int64 labels (N).
#pragma once

#include <cstdint>

#include <echelon/tensor/tensor.h>

namespace echelon {

// Mean cross-entropy of softmax(logits) against target: a one-element tensor, differentiable.
class CrossEntropyLoss {
 public:
  Tensor operator()(const Tensor& logits, const Tensor& target) const;
};

// Number of rows whose argmax equals the label (any device; result on the host).
int64_t correct_count(const Tensor& logits, const Tensor& target);
// Fraction of rows whose argmax equals the label, in [0, 1].
double accuracy(const Tensor& logits, const Tensor& target);

}  // namespace echelon
