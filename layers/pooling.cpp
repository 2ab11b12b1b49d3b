#include <echelon/layers/pooling.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>

namespace echelon {

namespace {
// A square window; stride 0 means stride = kernel_size (PyTorch's default).
Pool2dGeometry square_window(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode) {
  if (stride == 0) stride = kernel_size;
  ECH_CHECK(kernel_size > 0 && stride > 0 && padding >= 0 && 2 * padding <= kernel_size,
            "pool: invalid kernel_size=", kernel_size, " stride=", stride, " padding=", padding,
            " (padding must be at most half the kernel)");
  Pool2dGeometry p;
  p.kernel_h = p.kernel_w = kernel_size;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = padding;
  p.ceil_mode = ceil_mode;
  return p;
}

std::string describe_pool(const char* type, const Pool2dGeometry& p) {
  return str(type, "(kernel_size=", p.kernel_h, ", stride=", p.stride_h, ", padding=", p.pad_h,
             p.ceil_mode ? ", ceil_mode=True" : "", ")");
}
void check_image(const Tensor& x, const std::string& layer) {
  ECH_CHECK(x.dim() == 4, layer, ": expected input (N, C, H, W), got ", x.shape());
}
}  // namespace

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode)
    : window_(square_window(kernel_size, stride, padding, ceil_mode)) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_image(x, describe());
  return max_pool2d(x, window_);
}

Tensor MaxPool2d::forward_relu(const Tensor& x) {
  check_image(x, describe());
  return relu_max_pool2d(x, window_);
}

std::string MaxPool2d::describe() const {
  return describe_pool("MaxPool2d", window_);
}

AvgPool2d::AvgPool2d(int64_t kernel_size, int64_t stride, int64_t padding, bool ceil_mode)
    : window_(square_window(kernel_size, stride, padding, ceil_mode)) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_image(x, describe());
  return avg_pool2d(x, window_);
}

std::string AvgPool2d::describe() const {
  return describe_pool("AvgPool2d", window_);
}

Tensor GlobalAvgPool2d::forward(const Tensor& x) {
  check_image(x, name());
  return global_avg_pool2d(x);
}

}  // namespace echelon
