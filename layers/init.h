// PyTorch's default initialisation, drawn from a seeded Generator so a model is a pure function
// of its seed. Conv2d/Linear weights: kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)); biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
#pragma once

#include <cstdint>

#include <echelon/tensor/random.h>
#include <echelon/tensor/tensor.h>

namespace echelon::init {

// Fresh float32 CPU tensor with elements U(-bound, bound).
Tensor uniform(const Shape& shape, double bound, Generator& gen);
// fan_in of a weight: shape[1] * prod(shape[2:]) ((O, C, KH, KW) or (out, in)).
int64_t fan_in(const Shape& weight_shape);
Tensor kaiming_uniform_default(const Shape& weight_shape, Generator& gen);
Tensor default_bias(int64_t size, int64_t fan_in, Generator& gen);
// N(0, 2 / fan_out), fan_out = shape[0] * prod(shape[2:]): torchvision's VGG/ResNet conv init.
Tensor kaiming_normal_fan_out(const Shape& weight_shape, Generator& gen);
// N(0, std^2).
Tensor normal(const Shape& shape, double std, Generator& gen);

// While one is alive on this thread, every initialiser above returns zeros and draws nothing from
// its generator. For building a model whose every parameter is loaded right after (restore_model's
// strict load): drawing VGG-16's 15M weights only to overwrite them costs seconds. Nests.
class SkipGuard {
 public:
  SkipGuard();
  ~SkipGuard();
  SkipGuard(const SkipGuard&) = delete;
  SkipGuard& operator=(const SkipGuard&) = delete;
  static bool active();
};

}  // namespace echelon::init
