// Pooling layers over (N, C, H, W): MaxPool2d, AvgPool2d, and GlobalAvgPool2d (-> (N, C, 1, 1),
// PyTorch's AdaptiveAvgPool2d(1)). MaxPool2d and AvgPool2d keep their window as a Pool2dGeometry
// (kernels/pool.h), the struct the ops and kernels take.
#pragma once

#include <cstdint>
#include <string>

#include <echelon/layers/module.h>
#include <echelon/tensor/ops.h>

namespace echelon {

// MaxPool2d and AvgPool2d: stride 0 means stride = kernel_size (PyTorch's default).
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  // forward(relu(x)), bit for bit, as one node (relu_max_pool2d): Sequential's ReLU + MaxPool2d.
  Tensor forward_relu(const Tensor& x);
  std::string name() const override { return "MaxPool2d"; }
  std::string describe() const override;

 private:
  Pool2dGeometry window_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  std::string describe() const override;

 private:
  Pool2dGeometry window_;
};

class GlobalAvgPool2d : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GlobalAvgPool2d"; }
};

}  // namespace echelon
