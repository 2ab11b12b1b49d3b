// The model zoo. Every model is a FLAT Sequential of layers and residual blocks, so a pipeline can
// cut it at any index. Initialisation is PyTorch's default, drawn from Generator(seed).
//
//   lenet5    LeNet-5 (LeCun et al. 1998) with ReLU and max pooling (the modern variant; trains
//             faster with SGD than tanh + average pooling): conv 6@5x5 -> pool -> conv 16@5x5 ->
//             pool -> fc120 -> fc84 -> fc classes. 28x28 input is padded to 32x32 by conv1's
//             padding=2 (32x32 input: padding 0). 61,706 parameters for 1 channel, 10 classes.
//   alexnet   the CIFAR AlexNet of cuda-convnet / the TensorFlow CIFAR-10 tutorial: conv 64@5x5 ->
//             ReLU -> maxpool 3/2 -> LRN -> conv 64@5x5 -> ReLU -> LRN -> maxpool 3/2 -> fc384 ->
//             fc192 -> fc classes (1.76M parameters at 32x32; the first fc adapts to 28x28).
//   vgg16     VGG-16 for CIFAR: 13 conv3x3 (64,64,M,128,128,M,256x3,M,512x3,M,512x3,M) + ReLU, then
//   vgg16_bn  Linear(512, classes); _bn adds BatchNorm2d after each conv. A max pool is skipped
//             when the feature map is already 1x1 (28x28 input: 28-14-7-3-1, the fifth is skipped).
//             Initialised as torchvision's VGG (conv: kaiming_normal fan_out, zero bias; linear:
//             N(0, 0.01)): PyTorch's layer default leaves the plain VGG-16 untrainable.
//   resnet20/32/44/56/110  CIFAR ResNets (He et al. 2016) with option-A shortcuts:
//             0.27M/0.46M/0.66M/0.85M/1.7M parameters for 3 channels and 10 classes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/layers/sequential.h>

namespace echelon {

struct ModelInfo {
  std::string name;
  std::string description;
  // Parameters for the model's reference input (lenet5: 1x28x28, others: 3x32x32), 10 classes.
  int64_t reference_parameters = 0;
};

// image_size: input height = width; 0 picks 28 for 1 channel and 32 otherwise. Only the fully
// connected sizes of lenet5 and alexnet depend on it. Unknown names throw, listing the known ones.
std::shared_ptr<Sequential> make_model(const std::string& name, int64_t in_channels,
                                       int64_t num_classes, uint64_t seed, int64_t image_size = 0);
std::vector<ModelInfo> list_models();

}  // namespace echelon
