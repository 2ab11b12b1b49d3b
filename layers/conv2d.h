// Conv2d: weight (O, C, KH, KW), optional bias (O). The implementation (ours or cuDNN on CUDA)
// follows ops::conv_impl(), set process-wide. The layer keeps its window as a Conv2dGeometry
// (kernels/conv.h), the struct the ops and kernels take.
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

namespace echelon {

// The constructor's keyword arguments, square as PyTorch's nn.Conv2d.
struct Conv2dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv2dOptions options,
         Generator& gen);
  // x (N, C, H, W) -> (N, O, OH, OW); throws naming the layer when C differs.
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)), bit for bit, as one node (conv2d_relu): Sequential's Conv2d + ReLU.
  Tensor forward_relu(const Tensor& x);
  std::string name() const override { return "Conv2d"; }
  std::string describe() const override;

  // The window (kernel, stride, padding, dilation) without the shapes: for_input() fills them.
  const Conv2dGeometry& window() const { return window_; }

  Tensor weight, bias;  // bias undefined when options.bias is false

 private:
  Conv2dGeometry window_;  // kernel, stride, padding, dilation; channels come from weight
};

}  // namespace echelon
