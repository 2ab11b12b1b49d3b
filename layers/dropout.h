// Dropout: in training, zeroes each element with probability p and scales the survivors by
// 1/(1-p); identity in eval mode. Masks come from the layer's own Philox generator, so a run is
// reproducible from its seed and the CPU and CUDA masks agree.
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>
#include <echelon/tensor/random.h>

namespace echelon {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);  // throws unless 0 <= p < 1
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  std::string describe() const override;
  Generator& generator() { return gen_; }

 private:
  double p_;
  Generator gen_;
};

}  // namespace echelon
