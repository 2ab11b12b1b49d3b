// The GPU drivers' shared inputs (gpu_kernels_common.h): random device tensors and the conv
// layers of the four nets (also in CPU builds: exp_gpu_profile --list). Linked into
// exp_gpu_kernels and exp_gpu_profile.
#include "bench/gpu_kernels_common.h"

#include <echelon/tensor/ops.h>

namespace gpu_kernels {

using namespace echelon;

#if ECHELON_WITH_CUDA
Tensor random_cuda(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::add(ops::rand(shape, gen, kFloat32, Device::cuda(0)), -0.5);
}
#endif

std::vector<ConvShape> net_conv_shapes(int64_t batch) {
  return {
      {"lenet5", {batch, 1, 28, 28}, {6, 1, 5, 5}, 2},
      {"lenet5", {batch, 6, 14, 14}, {16, 6, 5, 5}, 0},
      {"resnet20", {batch, 16, 32, 32}, {16, 16, 3, 3}, 1},
      {"resnet20", {batch, 32, 16, 16}, {32, 32, 3, 3}, 1},
      {"resnet20", {batch, 64, 8, 8}, {64, 64, 3, 3}, 1},
      {"alexnet", {batch, 3, 32, 32}, {64, 3, 5, 5}, 2},
      {"alexnet", {batch, 64, 16, 16}, {64, 64, 5, 5}, 2},
      {"vgg16", {batch, 3, 32, 32}, {64, 3, 3, 3}, 1},
      {"vgg16", {batch, 64, 32, 32}, {64, 64, 3, 3}, 1},
      {"vgg16", {batch, 128, 16, 16}, {128, 128, 3, 3}, 1},
      {"vgg16", {batch, 256, 8, 8}, {256, 256, 3, 3}, 1},
      {"vgg16", {batch, 512, 4, 4}, {512, 512, 3, 3}, 1},
      {"vgg16", {batch, 512, 2, 2}, {512, 512, 3, 3}, 1},
  };
}

}  // namespace gpu_kernels
