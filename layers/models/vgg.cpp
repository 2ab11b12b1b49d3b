#include <echelon/base/error.h>
#include <echelon/layers/init.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/zoo.h>

namespace echelon::models {

std::shared_ptr<Sequential> vgg16(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                  bool batch_norm, Generator& gen) {
  ECH_CHECK(image_size >= 1, "vgg16: invalid image size ", image_size);
  // Configuration "D" of Simonyan & Zisserman; 0 marks a 2x2 max pool.
  const int64_t config[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                            0,  512, 512, 512, 0,   512, 512, 512, 0};
  auto net = std::make_shared<Sequential>();
  int64_t channels = in_channels, size = image_size;
  for (int64_t width : config) {
    if (width == 0) {
      // A 1x1 map cannot be pooled further: small inputs (28x28: 28-14-7-3-1) skip the last pools.
      if (size >= 2) {
        net->push_back(std::make_shared<MaxPool2d>(2));
        size /= 2;
      }
      continue;
    }
    auto conv = std::make_shared<Conv2d>(channels, width, 3, Conv2dOptions{.padding = 1}, gen);
    // torchvision's VGG init: with PyTorch's layer default (a = sqrt(5)) the signal shrinks ~3x
    // per layer and 13 plain convs leave nothing for the classifier to learn from.
    conv->weight.copy_(init::kaiming_normal_fan_out(conv->weight.shape(), gen));
    conv->bias.copy_(Tensor::zeros(conv->bias.shape()));
    net->push_back(conv);
    if (batch_norm) net->push_back(std::make_shared<BatchNorm2d>(width));
    net->push_back(std::make_shared<ReLU>());
    channels = width;
  }
  // Any map still larger than 1x1 (inputs above 32x32) is averaged to 1x1.
  if (size > 1) net->push_back(std::make_shared<GlobalAvgPool2d>());
  net->push_back(std::make_shared<Flatten>());
  auto classifier = std::make_shared<Linear>(512, num_classes, gen);
  classifier->weight.copy_(init::normal(classifier->weight.shape(), 0.01, gen));
  classifier->bias.copy_(Tensor::zeros(classifier->bias.shape()));
  net->push_back(classifier);
  return net;
}

}  // namespace echelon::models
