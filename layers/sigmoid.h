// Sigmoid activation, elementwise (any shape).
#pragma once

#include <string>

#include <echelon/autograd/functions.h>
#include <echelon/layers/module.h>

namespace echelon {

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string name() const override { return "Sigmoid"; }
};

}  // namespace echelon
