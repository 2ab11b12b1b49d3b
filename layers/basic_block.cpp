#include <echelon/layers/basic_block.h>

#include <echelon/autograd/functions.h>
#include <echelon/autograd/node.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon {

namespace {
// The strided, channel-offset window of a (N, planes, OH, OW) tensor that x's pixels occupy, and
// the matching window of x: both (N, C, OH, OW).
Tensor subsampled(const Tensor& x, int64_t stride) {
  return x.slice(2, 0, x.size(2), stride).slice(3, 0, x.size(3), stride);
}

// Channels [begin, begin + count) of y (N, C, H, W) as a new (N, count, H, W) tensor,
// differentiable (the gradient lands in that window, zeros elsewhere).
Tensor channel_window(const Tensor& y, int64_t begin, int64_t count) {
  Tensor window = y.narrow(1, begin, count).contiguous();
  const Shape& in_shape = y.shape();
  return autograd::record(
      "channel_window", window, {y},
      [in_shape, begin, count](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
        Tensor gy = Tensor::zeros(in_shape, g.dtype(), g.device());
        Tensor target = gy.narrow(1, begin, count);
        ops::copy_(target, g);
        return {gy};
      });
}

// conv1-BN-ReLU and the shortcut of a block: x (N, in, H, W) -> (N, 2*planes, OH, OW).
class BlockHead : public Module {
 public:
  BlockHead(std::string block, int64_t in_planes, int64_t planes, int64_t stride,
            std::shared_ptr<Conv2d> conv1, std::shared_ptr<BatchNorm2d> bn1)
      : block_(std::move(block)),
        in_planes_(in_planes),
        planes_(planes),
        stride_(stride),
        conv1_(register_module("conv1", std::move(conv1))),
        bn1_(register_module("bn1", std::move(bn1))) {}

  Tensor forward(const Tensor& x) override {
    Tensor out = bn1_->forward_relu(conv1_->forward(x));
    const bool reshape = stride_ != 1 || in_planes_ != planes_;
    return concat({out, reshape ? option_a_shortcut(x, planes_, stride_) : x}, 1);
  }
  std::string name() const override { return "BasicBlockHead"; }
  std::string describe() const override { return block_ + " head (conv1, bn1, shortcut)"; }

 private:
  std::string block_;
  int64_t in_planes_, planes_, stride_;
  std::shared_ptr<Conv2d> conv1_;
  std::shared_ptr<BatchNorm2d> bn1_;
};

// conv2-BN, the residual sum and the ReLU: (N, 2*planes, OH, OW) from BlockHead -> (N, planes,
// OH, OW).
class BlockTail : public Module {
 public:
  BlockTail(std::string block, int64_t planes, std::shared_ptr<Conv2d> conv2,
            std::shared_ptr<BatchNorm2d> bn2)
      : block_(std::move(block)),
        planes_(planes),
        conv2_(register_module("conv2", std::move(conv2))),
        bn2_(register_module("bn2", std::move(bn2))) {}

  Tensor forward(const Tensor& y) override {
    ECH_CHECK(y.dim() == 4 && y.size(1) == 2 * planes_, block_, " tail: expected its head's (N, ",
              2 * planes_, ", H, W) output, got ", y.shape());
    return bn2_->forward_add_relu(conv2_->forward(channel_window(y, 0, planes_)),
                                  channel_window(y, planes_, planes_));
  }
  std::string name() const override { return "BasicBlockTail"; }
  std::string describe() const override { return block_ + " tail (conv2, bn2, sum, ReLU)"; }

 private:
  std::string block_;
  int64_t planes_;
  std::shared_ptr<Conv2d> conv2_;
  std::shared_ptr<BatchNorm2d> bn2_;
};
}  // namespace

Tensor option_a_shortcut(const Tensor& x, int64_t planes, int64_t stride) {
  ECH_CHECK(x.dim() == 4 && planes >= x.size(1) && (planes - x.size(1)) % 2 == 0 && stride >= 1,
            "option_a_shortcut: cannot map ", x.shape(), " to ", planes, " channels at stride ",
            stride);
  const int64_t channels = x.size(1);
  const int64_t pad = (planes - channels) / 2;
  Tensor window = subsampled(x, stride);
  Tensor y =
      Tensor::zeros({x.size(0), planes, window.size(2), window.size(3)}, x.dtype(), x.device());
  Tensor target = y.narrow(1, pad, channels);
  ops::copy_(target, window);
  const Shape& in_shape = x.shape();
  return autograd::record("option_a_shortcut", y, {x},
                          [in_shape, pad, channels, stride](
                              const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
                            Tensor gx = Tensor::zeros(in_shape, g.dtype(), g.device());
                            Tensor gx_window = subsampled(gx, stride);
                            ops::copy_(gx_window, g.narrow(1, pad, channels));
                            return {gx};
                          });
}

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator& gen)
    : in_planes_(in_planes), planes_(planes), stride_(stride) {
  ECH_CHECK(stride == 1 || stride == 2, "BasicBlock: stride must be 1 or 2, got ", stride);
  conv1_ = register_module(
      "conv1",
      std::make_shared<Conv2d>(in_planes, planes, 3,
                               Conv2dOptions{.stride = stride, .padding = 1, .bias = false}, gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = register_module(
      "conv2",
      std::make_shared<Conv2d>(planes, planes, 3,
                               Conv2dOptions{.stride = 1, .padding = 1, .bias = false}, gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = bn1_->forward_relu(conv1_->forward(x));
  const bool reshape = stride_ != 1 || in_planes_ != planes_;
  return bn2_->forward_add_relu(conv2_->forward(out),
                                reshape ? option_a_shortcut(x, planes_, stride_) : x);
}

std::pair<std::shared_ptr<Module>, std::shared_ptr<Module>> BasicBlock::halves() const {
  const std::string block = describe();
  auto head = std::make_shared<BlockHead>(block, in_planes_, planes_, stride_, conv1_, bn1_);
  auto tail = std::make_shared<BlockTail>(block, planes_, conv2_, bn2_);
  head->train(is_training());
  tail->train(is_training());
  return {head, tail};
}

std::string BasicBlock::describe() const {
  return str("BasicBlock(", in_planes_, ", ", planes_, ", stride=", stride_, ")");
}

}  // namespace echelon
