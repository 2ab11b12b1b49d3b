#include <echelon/layers/init.h>

#include <cmath>

#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon::init {
namespace {
thread_local int skip_depth = 0;
}  // namespace

SkipGuard::SkipGuard() {
  ++skip_depth;
}
SkipGuard::~SkipGuard() {
  --skip_depth;
}
bool SkipGuard::active() {
  return skip_depth > 0;
}

Tensor uniform(const Shape& shape, double bound, Generator& gen) {
  if (SkipGuard::active()) return Tensor::zeros(shape);
  // U[0, 1) -> U[-bound, bound)
  return ops::add(ops::mul(ops::rand(shape, gen), 2.0 * bound), -bound);
}

int64_t fan_in(const Shape& weight_shape) {
  ECH_CHECK(weight_shape.size() >= 2, "init: a weight needs >= 2 dims, got ", weight_shape);
  int64_t fan = weight_shape[1];
  for (size_t i = 2; i < weight_shape.size(); ++i) fan *= weight_shape[i];
  return fan;
}

Tensor kaiming_uniform_default(const Shape& weight_shape, Generator& gen) {
  // kaiming_uniform with a = sqrt(5): gain = sqrt(2 / (1 + a^2)) = sqrt(1/3), bound =
  // gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in).
  return uniform(weight_shape, 1.0 / std::sqrt(static_cast<double>(fan_in(weight_shape))), gen);
}

Tensor default_bias(int64_t size, int64_t fan_in, Generator& gen) {
  return uniform({size}, 1.0 / std::sqrt(static_cast<double>(fan_in)), gen);
}

Tensor normal(const Shape& shape, double std, Generator& gen) {
  if (SkipGuard::active()) return Tensor::zeros(shape);
  return ops::mul(ops::randn(shape, gen), std);
}

Tensor kaiming_normal_fan_out(const Shape& weight_shape, Generator& gen) {
  int64_t fan_out = weight_shape.at(0);
  for (size_t i = 2; i < weight_shape.size(); ++i) fan_out *= weight_shape[i];
  return normal(weight_shape, std::sqrt(2.0 / static_cast<double>(fan_out)), gen);
}

}  // namespace echelon::init
