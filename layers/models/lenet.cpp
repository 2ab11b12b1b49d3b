#include <echelon/base/error.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/zoo.h>

namespace echelon::models {

std::shared_ptr<Sequential> lenet5(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                   Generator& gen) {
  // conv1 sees a 32x32 image either way: 28x28 inputs are padded by 2, as in LeCun's MNIST setup.
  ECH_CHECK(image_size == 28 || image_size == 32, "lenet5: image size must be 28 or 32, got ",
            image_size);
  const int64_t padding = (32 - image_size) / 2;
  auto net = std::make_shared<Sequential>();
  net->push_back(
      std::make_shared<Conv2d>(in_channels, 6, 5, Conv2dOptions{.padding = padding}, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(2));  // 28x28 -> 14x14
  net->push_back(std::make_shared<Conv2d>(6, 16, 5, Conv2dOptions{}, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(2));  // 10x10 -> 5x5
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(16 * 5 * 5, 120, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(120, 84, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(84, num_classes, gen));
  return net;
}

}  // namespace echelon::models
