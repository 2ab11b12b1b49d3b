#include <echelon/layers/conv2d.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>
#include <echelon/layers/init.h>

namespace echelon {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               Conv2dOptions options, Generator& gen)
    : in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_size_(kernel_size),
      options_(options) {
  ECH_CHECK(in_channels > 0 && out_channels > 0 && kernel_size > 0 && options.stride > 0 &&
                options.padding >= 0 && options.dilation > 0,
            "Conv2d: invalid configuration in=", in_channels, " out=", out_channels,
            " kernel=", kernel_size, " stride=", options.stride, " padding=", options.padding,
            " dilation=", options.dilation);
  const Shape weight_shape{out_channels, in_channels, kernel_size, kernel_size};
  weight = register_parameter("weight", init::kaiming_uniform_default(weight_shape, gen));
  if (options.bias) {
    bias = register_parameter("bias",
                              init::default_bias(out_channels, init::fan_in(weight_shape), gen));
  }
  params_.stride_h = params_.stride_w = options.stride;
  params_.pad_h = params_.pad_w = options.padding;
  params_.dilation_h = params_.dilation_w = options.dilation;
}

Tensor Conv2d::forward(const Tensor& x) {
  ECH_CHECK(x.dim() == 4 && x.size(1) == in_channels_, describe(), ": expected input (N, ",
            in_channels_, ", H, W), got ", x.shape());
  return echelon::conv2d(x, weight, bias, params_);  // not ops:: (found by ADL)
}

std::string Conv2d::describe() const {
  return str("Conv2d(", in_channels_, ", ", out_channels_, ", kernel_size=", kernel_size_,
             ", stride=", options_.stride, ", padding=", options_.padding,
             options_.dilation != 1 ? str(", dilation=", options_.dilation) : std::string(),
             options_.bias ? "" : ", bias=False", ")");
}

}  // namespace echelon
