#include <echelon/base/error.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/zoo.h>

namespace echelon::models {

std::shared_ptr<Sequential> resnet(int64_t depth, int64_t in_channels, int64_t num_classes,
                                   Generator& gen) {
  ECH_CHECK(depth >= 8 && (depth - 2) % 6 == 0, "resnet: depth must be 6n + 2, got ", depth);
  const int64_t blocks_per_stage = (depth - 2) / 6;
  auto net = std::make_shared<Sequential>();
  net->push_back(std::make_shared<Conv2d>(in_channels, 16, 3,
                                          Conv2dOptions{.padding = 1, .bias = false}, gen));
  net->push_back(std::make_shared<BatchNorm2d>(16));
  net->push_back(std::make_shared<ReLU>());
  // Three stages of 16, 32, 64 channels; the first block of stages 2 and 3 halves the map.
  int64_t in_planes = 16;
  for (int64_t planes : {16, 32, 64}) {
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      const int64_t stride = (b == 0 && planes != 16) ? 2 : 1;
      net->push_back(std::make_shared<BasicBlock>(in_planes, planes, stride, gen));
      in_planes = planes;
    }
  }
  net->push_back(std::make_shared<GlobalAvgPool2d>());
  net->push_back(std::make_shared<Flatten>());
  net->push_back(std::make_shared<Linear>(64, num_classes, gen));
  return net;
}

}  // namespace echelon::models
