// Linear: y = x W^T + b with weight (out, in), bias (out).
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>
#include <echelon/tensor/random.h>

namespace echelon {

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true);
  // x (N, in) -> (N, out); throws naming the layer when `in` differs.
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), fused (autograd's linear_relu): Sequential runs a Linear and the ReLU after
  // it through this.
  Tensor forward_relu(const Tensor& x);
  std::string name() const override { return "Linear"; }
  std::string describe() const override;

  Tensor weight, bias;

 private:
  void check_input(const Tensor& x) const;

  int64_t in_features_, out_features_;
};

}  // namespace echelon
