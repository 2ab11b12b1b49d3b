#include <echelon/layers/models/registry.h>

#include <echelon/base/error.h>
#include <echelon/layers/models/zoo.h>

namespace echelon {

namespace {
const std::vector<ModelInfo>& known_models() {
  static const std::vector<ModelInfo> models = {
      {"lenet5", "LeNet-5 (ReLU, max pooling), 1x28x28 padded to 32x32", 61706},
      {"alexnet", "CIFAR AlexNet (cuda-convnet / TF tutorial): 2 conv + LRN, 3 fc", 1756426},
      {"vgg16", "VGG-16 for CIFAR: 13 conv3x3 + Linear(512, classes)", 14719818},
      {"vgg16_bn", "VGG-16 for CIFAR with BatchNorm after each conv", 14728266},
      {"resnet20", "CIFAR ResNet-20 (He et al. 2016), option-A shortcuts", 269722},
      {"resnet32", "CIFAR ResNet-32, option-A shortcuts", 464154},
      {"resnet44", "CIFAR ResNet-44, option-A shortcuts", 658586},
      {"resnet56", "CIFAR ResNet-56, option-A shortcuts", 853018},
      {"resnet110", "CIFAR ResNet-110, option-A shortcuts", 1727962},
  };
  return models;
}
}  // namespace

std::vector<ModelInfo> list_models() {
  return known_models();
}

std::shared_ptr<Sequential> make_model(const std::string& name, int64_t in_channels,
                                       int64_t num_classes, uint64_t seed, int64_t image_size) {
  ECH_CHECK(in_channels >= 1 && num_classes >= 1, "make_model(", name,
            "): in_channels and num_classes must be >= 1, got ", in_channels, " and ", num_classes);
  if (image_size == 0) image_size = in_channels == 1 ? 28 : 32;
  Generator gen(seed);
  if (name == "lenet5") return models::lenet5(in_channels, num_classes, image_size, gen);
  if (name == "alexnet") return models::alexnet(in_channels, num_classes, image_size, gen);
  if (name == "vgg16") return models::vgg16(in_channels, num_classes, image_size, false, gen);
  if (name == "vgg16_bn") return models::vgg16(in_channels, num_classes, image_size, true, gen);
  for (int64_t depth : {20, 32, 44, 56, 110}) {
    if (name == "resnet" + std::to_string(depth)) {
      return models::resnet(depth, in_channels, num_classes, gen);
    }
  }
  std::string known;
  for (const ModelInfo& info : known_models()) known += (known.empty() ? "" : ", ") + info.name;
  ECH_FAIL("unknown model '", name, "' (known: ", known, ")");
}

}  // namespace echelon
