#include <echelon/layers/conv2d.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>
#include <echelon/layers/init.h>

namespace echelon {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
               Conv2dOptions options, Generator& gen) {
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
  window_.kernel_h = window_.kernel_w = kernel_size;
  window_.stride_h = window_.stride_w = options.stride;
  window_.pad_h = window_.pad_w = options.padding;
  window_.dilation_h = window_.dilation_w = options.dilation;
}

Tensor Conv2d::forward(const Tensor& x) {
  ECH_CHECK(x.dim() == 4 && x.size(1) == weight.size(1), describe(), ": expected input (N, ",
            weight.size(1), ", H, W), got ", x.shape());
  return conv2d(x, weight, bias, window_);
}

Tensor Conv2d::forward_relu(const Tensor& x) {
  ECH_CHECK(x.dim() == 4 && x.size(1) == weight.size(1), describe(), ": expected input (N, ",
            weight.size(1), ", H, W), got ", x.shape());
  return conv2d_relu(x, weight, bias, window_);
}

std::string Conv2d::describe() const {
  return str("Conv2d(", weight.size(1), ", ", weight.size(0), ", kernel_size=", window_.kernel_h,
             ", stride=", window_.stride_h, ", padding=", window_.pad_h,
             window_.dilation_h != 1 ? str(", dilation=", window_.dilation_h) : std::string(),
             bias.defined() ? "" : ", bias=False", ")");
}

}  // namespace echelon
