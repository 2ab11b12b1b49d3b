// LocalResponseNorm across channels (AlexNet), PyTorch's formula:
// y = x / (k + alpha/size * sum over `size` neighbouring channels of x^2)^beta.
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>

namespace echelon {

class LocalResponseNorm : public Module {
 public:
  explicit LocalResponseNorm(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
  Tensor forward(const Tensor& x) override;  // (N, C, H, W)
  std::string name() const override { return "LocalResponseNorm"; }
  std::string describe() const override;

 private:
  int64_t size_;
  double alpha_, beta_, k_;
};

}  // namespace echelon
