#include <echelon/layers/sequential.h>

#include <echelon/base/error.h>
#include <echelon/layers/batch_norm.h>
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

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    try {
      // A batch norm followed by a ReLU (a ResNet stem, VGG-BN) runs as one fused node: the same
      // result without the ReLU's own passes over the activation (BatchNorm::forward_relu).
      auto* bn = dynamic_cast<BatchNorm*>(layers_[i].get());
      if (bn && i + 1 < layers_.size() && dynamic_cast<ReLU*>(layers_[i + 1].get())) {
        h = bn->forward_relu(h);
        ++i;
        continue;
      }
      // A ReLU followed by a max pooling (LeNet-5, AlexNet, VGG) likewise: the pooling reads its
      // input through the ReLU, and the ReLU's activation is never stored (relu_max_pool2d).
      auto* pool =
          i + 1 < layers_.size() ? dynamic_cast<MaxPool2d*>(layers_[i + 1].get()) : nullptr;
      if (pool && dynamic_cast<ReLU*>(layers_[i].get()) && h.dim() == 4) {
        ++i;  // an error names the pooling, whose checks run first
        h = pool->forward_relu(h);
        continue;
      }
      h = layers_[i]->forward(h);
    } catch (const Error& e) {
      // Name the failing layer: "layer 3 (Conv2d): conv2d: ..."
      throw Error(str("Sequential layer ", named_children()[i].first, " (", layers_[i]->name(),
                      "): ", e.message()));
    }
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

std::shared_ptr<Sequential> Sequential::slice(size_t begin, size_t end) const {
  ECH_CHECK(begin <= end && end <= layers_.size(), "Sequential::slice: [", begin, ", ", end,
            ") is not a range within ", layers_.size(), " layers");
  std::vector<std::shared_ptr<Module>> layers(layers_.begin() + begin, layers_.begin() + end);
  std::vector<std::string> names;
  for (size_t i = begin; i < end; ++i) names.push_back(named_children()[i].first);
  auto out = std::shared_ptr<Sequential>(new Sequential(std::move(layers), std::move(names)));
  out->train(is_training());
  return out;
}

}  // namespace echelon
