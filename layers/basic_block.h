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

  friend class BlockPiece;
};

// Steps [first, last] of a BasicBlock as one layer, so that a pipeline cut can fall inside the
// block (Sequential::with_split_blocks): step 0 conv1 (and the shortcut), 1 BN-ReLU, 2 conv2,
// 3 BN, the residual sum and the ReLU. Between steps the block carries two tensors, h and the
// shortcut; a piece that ends before step 3 returns both as one, cat(h, shortcut) along channels
// (N, 2*planes, OH, OW), so one tensor still crosses a cut, and a piece that starts after step 0
// splits it again. Pieces hold the block's own modules (parameters keep their names) and the block
// itself (Sequential::join_split_blocks merges neighbouring pieces); running the pieces in order
// computes what the block's forward does, bit for bit.
class BlockPiece : public Module {
 public:
  static constexpr int kSteps = 4;
  // 0 <= first <= last < kSteps.
  BlockPiece(std::shared_ptr<BasicBlock> block, int first, int last);

  // x: the block's input (N, in, H, W) when first == 0, else the previous piece's
  // (N, 2*planes, OH, OW); returns (N, planes, OH, OW) when last == 3, else (N, 2*planes, OH, OW).
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BasicBlockPiece"; }
  std::string describe() const override;
  const std::shared_ptr<BasicBlock>& block() const { return block_; }
  int first() const { return first_; }
  int last() const { return last_; }

 private:
  std::shared_ptr<BasicBlock> block_;
  int first_, last_;
};

}  // namespace echelon
