// Batch normalisation (PyTorch semantics): weight (gamma) = 1, bias (beta) = 0, buffers
// running_mean = 0, running_var = 1, num_batches_tracked (int64 scalar, kept on the host). Training
// normalises with batch statistics and updates the running ones (momentum 0.1: running = 0.9
// running + 0.1 batch, unbiased variance); eval mode uses the running statistics.
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>

namespace echelon {

class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), fused into one kernel each way on the fast CPU path (autograd/functions.h).
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual), fused likewise (a ResNet block's end).
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  std::string describe() const override;

  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  BatchNorm(int64_t num_features, int64_t expected_rank, double momentum, double eps);

 private:
  // Checks x and counts the batch when training (the part of forward shared with forward_relu).
  void begin_forward(const Tensor& x);

  int64_t num_features_, expected_rank_;
  double momentum_, eps_;
};

// Over (N, C, H, W).
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double momentum = 0.1, double eps = 1e-5)
      : BatchNorm(num_features, 4, momentum, eps) {}
  std::string name() const override { return "BatchNorm2d"; }
};

// Over (N, C).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double momentum = 0.1, double eps = 1e-5)
      : BatchNorm(num_features, 2, momentum, eps) {}
  std::string name() const override { return "BatchNorm1d"; }
};

}  // namespace echelon
