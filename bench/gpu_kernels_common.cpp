// The GPU drivers' shared inputs (gpu_kernels_common.h): random device tensors and the conv
// layers of the four nets, read from the model zoo (also in CPU builds: exp_gpu_profile --list).
// Linked into exp_gpu_kernels and exp_gpu_profile.
#include "bench/gpu_kernels_common.h"

#include <cstdio>
#include <string_view>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

namespace gpu_kernels {

using namespace echelon;

#if ECHELON_WITH_CUDA
Tensor random_cuda(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::add(ops::rand(shape, gen, kFloat32, Device::cuda(0)), -0.5);
}
#endif

Conv2dGeometry ConvShape::window() const {
  Conv2dGeometry g;
  g.kernel_h = w[2], g.kernel_w = w[3];
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  return g;
}

Conv2dGeometry ConvShape::full() const {
  return window().for_input(x[0], x[1], x[2], x[3], w[0]);
}

std::string ConvShape::label() const {
  char text[96];
  std::snprintf(text, sizeof text, "%-8s C=%-4lld O=%-4lld %lldx%lld %lldx%lld%s", net,
                static_cast<long long>(x[1]), static_cast<long long>(w[0]),
                static_cast<long long>(x[2]), static_cast<long long>(x[3]),
                static_cast<long long>(w[2]), static_cast<long long>(w[3]),
                stride == 1 ? "" : ("/" + std::to_string(stride)).c_str());
  return text;
}

namespace {

// `module` if it is a Conv2d, else the Conv2d layers below it in the order they were registered.
void collect_convs(const Module& module, std::vector<const Conv2d*>& convs) {
  if (const auto* conv = dynamic_cast<const Conv2d*>(&module)) {
    convs.push_back(conv);
    return;
  }
  for (const auto& [name, child] : module.named_children()) collect_convs(*child, convs);
}

}  // namespace

std::vector<ConvShape> net_conv_shapes(int64_t batch) {
  struct Net {
    const char* name;
    int64_t channels, size;  // the reference input: make_model's defaults
  };
  static constexpr Net kNets[] = {
      {"lenet5", 1, 28}, {"resnet20", 3, 32}, {"alexnet", 3, 32}, {"vgg16", 3, 32}};
  const NoGradGuard no_grad;
  std::vector<ConvShape> shapes;
  const auto add = [&](const ConvShape& shape) {
    for (ConvShape& seen : shapes)
      if (std::string_view(seen.net) == shape.net && seen.x == shape.x && seen.w == shape.w &&
          seen.stride == shape.stride && seen.pad == shape.pad) {
        ++seen.count;
        return;
      }
    shapes.push_back(shape);
  };
  for (const Net& net : kNets) {
    const std::shared_ptr<Sequential> model = make_model(net.name, net.channels, 10, 0, net.size);
    model->train(false);
    Tensor x = Tensor::zeros({1, net.channels, net.size, net.size});  // one image: the shapes
    for (const std::shared_ptr<Module>& layer : model->children()) {
      std::vector<const Conv2d*> convs;
      collect_convs(*layer, convs);
      // A block's convs run one after the other (BasicBlock: conv1, BN and ReLU, conv2), so each
      // takes the output of the one before; the block's own forward gives the next layer's input.
      Shape in = x.shape();
      for (const Conv2d* conv : convs) {
        const Conv2dGeometry& g = conv->window();
        ECH_CHECK(g.stride_h == g.stride_w && g.pad_h == g.pad_w && g.dilation_h == 1 &&
                      g.dilation_w == 1,
                  net.name, ": ", conv->describe(), " is not a square, undilated window");
        const ConvShape shape{
            net.name, {batch, in[1], in[2], in[3]}, conv->weight.shape(), g.stride_h, g.pad_h, 1};
        add(shape);
        const Conv2dGeometry out = shape.full();
        in = {1, out.o, out.out_h, out.out_w};
      }
      x = layer->forward(x);
    }
  }
  return shapes;
}

}  // namespace gpu_kernels
