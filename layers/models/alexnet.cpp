#include <echelon/base/error.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/zoo.h>

namespace echelon::models {

namespace {
// Output size of a 3x3, stride-2, padding-1 max pool ("SAME" pooling: ceil(size / 2)).
int64_t pooled(int64_t size) {
  return (size + 2 - 3) / 2 + 1;
}
}  // namespace

std::shared_ptr<Sequential> alexnet(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                    Generator& gen) {
  ECH_CHECK(image_size >= 8, "alexnet: image size must be >= 8, got ", image_size);
  const int64_t features = pooled(pooled(image_size));  // 32 -> 8, 28 -> 7
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(in_channels, 64, 5, Conv2dOptions{.padding = 2}, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<MaxPool2d>(3, 2, 1));
  net->push_back(std::make_shared<LocalResponseNorm>(5, 1e-4, 0.75, 2.0));
  net->push_back(std::make_shared<Conv2d>(64, 64, 5, Conv2dOptions{.padding = 2}, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<LocalResponseNorm>(5, 1e-4, 0.75, 2.0));
  net->push_back(std::make_shared<MaxPool2d>(3, 2, 1));
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(64 * features * features, 384, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(384, 192, gen));
  net->push_back(std::make_shared<ReLU>());
  net->push_back(std::make_shared<Linear>(192, num_classes, gen));
  return net;
}

}  // namespace echelon::models
