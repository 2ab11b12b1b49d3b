// Sequential: runs its layers in order. Every model in layers/models is a FLAT Sequential, so a
// pipeline can cut it at any index; residual blocks are single entries.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <echelon/layers/module.h>

namespace echelon {

class Sequential : public Module {
 public:
  Sequential() = default;
  // Children are named "0", "1", ... in order.
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);

  // The layers in order, each pair below run as one fused node (forward_from).
  Tensor forward(const Tensor& x) override;
  // Runs layer `index` on x, or with the next one as one node when the pair fuses: a BatchNorm
  // then a ReLU (batch_norm_relu), a ReLU then a MaxPool2d on an image (relu_max_pool2d), a
  // Conv2d then a ReLU not followed by a MaxPool2d (conv2d_relu); the same result and gradients
  // bit for bit. *ran = the layers run (1 or 2). For callers that walk
  // the layers themselves (a pipeline stage).
  Tensor forward_from(size_t index, const Tensor& x, size_t* ran);
  // Whether forward_from(index, x) runs layers index and index + 1 as one fused node.
  bool fuses_with_next(size_t index, const Tensor& x) const;
  std::string name() const override { return "Sequential"; }
  std::string describe() const override;  // one line per layer

  void push_back(std::shared_ptr<Module> layer);  // named by its index
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& at(size_t index) const;  // throws when out of range
  const std::vector<std::shared_ptr<Module>>& layers() const { return layers_; }
  // Layers [begin, end) as a new Sequential sharing the SAME layer objects (and so the same
  // parameters). Children keep their original names, as PyTorch's seq[begin:end] does, so
  // "3.weight" in a slice is "3.weight" in the whole model.
  std::shared_ptr<Sequential> slice(size_t begin, size_t end) const;
  // The same layers with each residual block as its steps (BlockPiece: conv1, BN-ReLU, conv2,
  // BN-sum-ReLU), all under the block's name: a pipeline cut can then fall inside a block, and
  // parameter names stay those of this model. Shares the layer objects, as slice does.
  std::shared_ptr<Sequential> with_split_blocks() const;
  // The reverse, for a slice of such a view: neighbouring pieces of one block become one piece,
  // or the block itself when they are all of it, so only a block that a cut falls in runs split.
  std::shared_ptr<Sequential> join_split_blocks() const;

 private:
  Sequential(std::vector<std::shared_ptr<Module>> layers, std::vector<std::string> names);
  // A Sequential of these (shared) layers under these names, in this one's train/eval mode.
  std::shared_ptr<Sequential> view(std::vector<std::shared_ptr<Module>> layers,
                                   std::vector<std::string> names) const;

  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace echelon
