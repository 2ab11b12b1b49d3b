#include <echelon/layers/sequential.h>

#include <echelon/base/error.h>
#include <echelon/layers/basic_block.h>
#include <echelon/layers/batch_norm.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/linear.h>
#include <echelon/layers/pooling.h>
#include <echelon/layers/relu.h>

namespace echelon {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers) {
  for (auto& layer : layers) push_back(std::move(layer));
}

Sequential::Sequential(std::vector<std::shared_ptr<Module>> layers, std::vector<std::string> names)
    : layers_(std::move(layers)) {
  for (size_t i = 0; i < layers_.size(); ++i) add_child(names[i], layers_[i]);
}

void Sequential::push_back(std::shared_ptr<Module> layer) {
  ECH_CHECK(layer != nullptr, "Sequential: layer ", layers_.size(), " is null");
  add_child(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

bool Sequential::fuses_with_next(size_t index, const Tensor& x) const {
  if (index + 1 >= layers_.size()) return false;
  const Module* layer = layers_[index].get();
  const Module* next = layers_[index + 1].get();
  // A batch norm followed by a ReLU (a ResNet stem, VGG-BN): the same result without the ReLU's
  // own passes over the activation (BatchNorm::forward_relu).
  if (dynamic_cast<const BatchNorm*>(layer) && dynamic_cast<const ReLU*>(next)) return true;
  // A convolution followed by a ReLU (VGG, AlexNet): the ReLU clamps in the convolution's store
  // and its backward mask rides the bias gradient's pass (conv2d_relu). Not when a max pooling
  // follows the ReLU: relu_max_pool2d then takes that ReLU, which is cheaper: it masks the pooled
  // gradient (a quarter of the elements for 2x2) and keeps only the pooled output, where
  // conv2d_relu would keep the convolution's whole output for its mask and read it back.
  if (dynamic_cast<const Conv2d*>(layer) && dynamic_cast<const ReLU*>(next)) {
    const bool pooling_next = index + 2 < layers_.size() &&
                              dynamic_cast<const MaxPool2d*>(layers_[index + 2].get()) &&
                              x.dim() == 4;
    return !pooling_next;
  }
  // A linear layer followed by a ReLU (the classifiers of LeNet-5, AlexNet, VGG): the bias and the
  // ReLU in one pass, the ReLU's backward in the bias gradient's (linear_relu).
  if (dynamic_cast<const Linear*>(layer) && dynamic_cast<const ReLU*>(next)) return true;
  // A ReLU followed by a max pooling (LeNet-5, AlexNet, VGG): the pooling reads its input through
  // the ReLU, and the ReLU's activation is never stored (relu_max_pool2d).
  return dynamic_cast<const ReLU*>(layer) && dynamic_cast<const MaxPool2d*>(next) && x.dim() == 4;
}

Tensor Sequential::forward_from(size_t index, const Tensor& x, size_t* ran) {
  *ran = 1;
  if (!fuses_with_next(index, x)) return layers_[index]->forward(x);
  *ran = 2;
  if (auto* bn = dynamic_cast<BatchNorm*>(layers_[index].get())) return bn->forward_relu(x);
  if (auto* conv = dynamic_cast<Conv2d*>(layers_[index].get())) return conv->forward_relu(x);
  if (auto* linear = dynamic_cast<Linear*>(layers_[index].get())) return linear->forward_relu(x);
  return static_cast<MaxPool2d&>(*layers_[index + 1]).forward_relu(x);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size();) {
    size_t ran = 1;
    try {
      h = forward_from(i, h, &ran);
    } catch (const Error& e) {
      // Name the failing layer: "layer 3 (Conv2d): conv2d: ..."; of a fused pair, the one whose
      // checks run first: the batch norm, the convolution, or the pooling after a ReLU.
      const bool pooling_after_relu = ran == 2 && dynamic_cast<ReLU*>(layers_[i].get());
      const size_t failed = pooling_after_relu ? i + 1 : i;
      throw Error(str("Sequential layer ", named_children()[failed].first, " (",
                      layers_[failed]->name(), "): ", e.message()));
    }
    i += ran;
  }
  return h;
}

std::string Sequential::describe() const {
  std::string out = "Sequential(\n";
  for (size_t i = 0; i < layers_.size(); ++i) {
    out += "  (" + named_children()[i].first + "): " + layers_[i]->describe() + "\n";
  }
  return out + ")";
}

const std::shared_ptr<Module>& Sequential::at(size_t index) const {
  ECH_CHECK(index < layers_.size(), "Sequential::at: index ", index, " out of range for ",
            layers_.size(), " layers");
  return layers_[index];
}

std::shared_ptr<Sequential> Sequential::view(std::vector<std::shared_ptr<Module>> layers,
                                             std::vector<std::string> names) const {
  auto out = std::shared_ptr<Sequential>(new Sequential(std::move(layers), std::move(names)));
  out->train(is_training());
  return out;
}

std::shared_ptr<Sequential> Sequential::slice(size_t begin, size_t end) const {
  ECH_CHECK(begin <= end && end <= layers_.size(), "Sequential::slice: [", begin, ", ", end,
            ") is not a range within ", layers_.size(), " layers");
  std::vector<std::shared_ptr<Module>> layers(layers_.begin() + begin, layers_.begin() + end);
  std::vector<std::string> names;
  for (size_t i = begin; i < end; ++i) names.push_back(named_children()[i].first);
  return view(std::move(layers), std::move(names));
}

std::shared_ptr<Sequential> Sequential::with_split_blocks() const {
  std::vector<std::shared_ptr<Module>> layers;
  std::vector<std::string> names;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const std::string& name = named_children()[i].first;
    if (auto block = std::dynamic_pointer_cast<BasicBlock>(layers_[i])) {
      for (int step = 0; step < BlockPiece::kSteps; ++step) {
        layers.push_back(std::make_shared<BlockPiece>(block, step, step));
        names.push_back(name);
      }
    } else {
      layers.push_back(layers_[i]);
      names.push_back(name);
    }
  }
  return view(std::move(layers), std::move(names));
}

std::shared_ptr<Sequential> Sequential::join_split_blocks() const {
  std::vector<std::shared_ptr<Module>> layers;
  std::vector<std::string> names;
  for (size_t i = 0; i < layers_.size(); ++i) {
    names.push_back(named_children()[i].first);
    const auto* piece = dynamic_cast<const BlockPiece*>(layers_[i].get());
    if (!piece) {
      layers.push_back(layers_[i]);
      continue;
    }
    // The run of pieces of this block that continue each other.
    int last = piece->last();
    for (; i + 1 < layers_.size(); ++i) {
      const auto* next = dynamic_cast<const BlockPiece*>(layers_[i + 1].get());
      if (!next || next->block() != piece->block() || next->first() != last + 1) break;
      last = next->last();
    }
    if (piece->first() == 0 && last == BlockPiece::kSteps - 1)
      layers.push_back(piece->block());
    else
      layers.push_back(std::make_shared<BlockPiece>(piece->block(), piece->first(), last));
  }
  return view(std::move(layers), std::move(names));
}

}  // namespace echelon
