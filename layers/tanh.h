// Tanh activation, elementwise (any shape).
#pragma once

#include <string>

#include <echelon/autograd/functions.h>
#include <echelon/layers/module.h>

namespace echelon {

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string name() const override { return "Tanh"; }
};

}  // namespace echelon
