// Flatten: (N, d1, d2, ...) -> (N, d1*d2*...), i.e. PyTorch's Flatten(start_dim=1).
#pragma once

#include <string>

#include <echelon/autograd/functions.h>
#include <echelon/layers/module.h>

namespace echelon {

class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override { return flatten(x, 1, -1); }
  std::string name() const override { return "Flatten"; }
};

}  // namespace echelon
