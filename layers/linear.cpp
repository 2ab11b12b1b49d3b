#include <echelon/layers/linear.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>
#include <echelon/layers/init.h>

namespace echelon {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool has_bias)
    : in_features_(in_features), out_features_(out_features) {
  ECH_CHECK(in_features > 0 && out_features > 0, "Linear: invalid sizes in=", in_features,
            " out=", out_features);
  weight =
      register_parameter("weight", init::kaiming_uniform_default({out_features, in_features}, gen));
  if (has_bias)
    bias = register_parameter("bias", init::default_bias(out_features, in_features, gen));
}

void Linear::check_input(const Tensor& x) const {
  ECH_CHECK(x.dim() == 2 && x.size(1) == in_features_, describe(), ": expected input (N, ",
            in_features_, "), got ", x.shape());
}

Tensor Linear::forward(const Tensor& x) {
  check_input(x);
  return linear(x, weight, bias);
}

Tensor Linear::forward_relu(const Tensor& x) {
  check_input(x);
  return linear_relu(x, weight, bias);
}

std::string Linear::describe() const {
  return str("Linear(in_features=", in_features_, ", out_features=", out_features_,
             bias.defined() ? "" : ", bias=False", ")");
}

}  // namespace echelon
