#include <echelon/layers/basic_block.h>

#include <echelon/autograd/functions.h>
#include <echelon/autograd/node.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon {

namespace {

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

}  // namespace

Tensor option_a_shortcut(const Tensor& x, int64_t planes, int64_t stride) {
  ECH_CHECK(x.dim() == 4 && planes >= x.size(1) && (planes - x.size(1)) % 2 == 0 && stride >= 1,
            "option_a_shortcut: cannot map ", x.shape(), " to ", planes, " channels at stride ",
            stride);
  // One pass each way (ops::pad_channels_subsample): the zeros and the strided copy are one
  // kernel on a GPU.
  const int64_t pad = (planes - x.size(1)) / 2;
  const Shape& in_shape = x.shape();
  return autograd::record(
      "option_a_shortcut", ops::pad_channels_subsample(x, pad, stride), {x},
      [in_shape, pad, stride](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
        return {ops::pad_channels_subsample_backward(g, pad, stride, in_shape)};
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

std::string BasicBlock::describe() const {
  return str("BasicBlock(", in_planes_, ", ", planes_, ", stride=", stride_, ")");
}

BlockPiece::BlockPiece(std::shared_ptr<BasicBlock> block, int first, int last)
    : block_(std::move(block)), first_(first), last_(last) {
  ECH_CHECK(block_ != nullptr && 0 <= first && first <= last && last < kSteps,
            "BlockPiece: steps [", first, ", ", last, "] of a block of ", kSteps);
  const BasicBlock& b = *block_;
  const std::pair<const char*, std::shared_ptr<Module>> modules[kSteps] = {
      {"conv1", b.conv1_}, {"bn1", b.bn1_}, {"conv2", b.conv2_}, {"bn2", b.bn2_}};
  for (int step = first; step <= last; ++step)
    register_module(modules[step].first, modules[step].second);
  train(b.is_training());
}

Tensor BlockPiece::forward(const Tensor& x) {
  const BasicBlock& b = *block_;
  Tensor h, shortcut;
  if (first_ == 0) {
    const bool reshape = b.stride_ != 1 || b.in_planes_ != b.planes_;
    h = b.conv1_->forward(x);
    shortcut = reshape ? option_a_shortcut(x, b.planes_, b.stride_) : x;
  } else {
    ECH_CHECK(x.dim() == 4 && x.size(1) == 2 * b.planes_, describe(),
              ": expected the previous piece's (N, ", 2 * b.planes_, ", H, W) output, got ",
              x.shape());
    h = channel_window(x, 0, b.planes_);
    shortcut = channel_window(x, b.planes_, b.planes_);
  }
  if (first_ <= 1 && last_ >= 1) h = b.bn1_->forward_relu(h);
  if (first_ <= 2 && last_ >= 2) h = b.conv2_->forward(h);
  if (last_ == 3) return b.bn2_->forward_add_relu(h, shortcut);
  return concat({h, shortcut}, 1);
}

std::string BlockPiece::describe() const {
  static const char* const kNames[kSteps] = {"conv1", "bn1", "conv2", "bn2+sum"};
  return str(block_->describe(), " ", kNames[first_],
             first_ == last_ ? std::string() : str("..", kNames[last_]));
}

}  // namespace echelon
