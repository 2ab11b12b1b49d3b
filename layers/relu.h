// ReLU activation, elementwise (any shape).
#pragma once

#include <string>

#include <echelon/autograd/functions.h>
#include <echelon/layers/module.h>

namespace echelon {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string name() const override { return "ReLU"; }
};

}  // namespace echelon
