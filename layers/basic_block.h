// BasicBlock of the CIFAR ResNets (He et al. 2016, section 4.2): conv3x3-BN-ReLU-conv3x3-BN, plus
// the shortcut, then ReLU. Option A shortcut: when the shape changes, the identity is subsampled
// with stride 2 and zero-padded in channels (no parameters), so resnet20 has 0.27M parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <echelon/layers/batch_norm.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/module.h>
#include <echelon/tensor/random.h>

namespace echelon {

// The option-A shortcut, differentiable: x (N, C, H, W) -> (N, planes, ceil(H/stride),
// ceil(W/stride)) taking every stride-th pixel and zero-padding channels equally on both sides.
Tensor option_a_shortcut(const Tensor& x, int64_t planes, int64_t stride);

class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, Generator& gen);
  Tensor forward(const Tensor& x) override;  // (N, in, H, W) -> (N, planes, H/stride, W/stride)
  std::string name() const override { return "BasicBlock"; }
  std::string describe() const override;

 private:
  int64_t in_planes_, planes_, stride_;
  std::shared_ptr<Conv2d> conv1_, conv2_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;

  friend class BlockHalf;
};

// A BasicBlock as two layers, so that a pipeline cut can fall inside it
// (Sequential::with_split_blocks). The head runs conv1-BN-ReLU and the shortcut and returns both
// as one tensor, cat(h, shortcut) along channels (N, 2*planes, OH, OW): one tensor still crosses a
// cut. The tail splits it, runs conv2-BN, adds and applies the ReLU. The halves hold the block's
// own modules (so parameters keep their names) and the block itself (so that a head followed by
// its tail can be joined back: Sequential::join_split_blocks); tail(head(x)) computes what the
// block's forward does, bit for bit.
class BlockHalf : public Module {
 public:
  static std::pair<std::shared_ptr<BlockHalf>, std::shared_ptr<BlockHalf>> split(
      const std::shared_ptr<BasicBlock>& block);

  // head: x (N, in, H, W) -> (N, 2*planes, OH, OW); tail: that -> (N, planes, OH, OW).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return head_ ? "BasicBlockHead" : "BasicBlockTail"; }
  std::string describe() const override;
  bool is_head() const { return head_; }
  const std::shared_ptr<BasicBlock>& block() const { return block_; }

 private:
  BlockHalf(std::shared_ptr<BasicBlock> block, bool head);

  std::shared_ptr<BasicBlock> block_;
  bool head_;
};

}  // namespace echelon
