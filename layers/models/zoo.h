// Builders behind make_model (layers/models/registry.h), one per family; internal to the zoo.
#pragma once

#include <cstdint>
#include <memory>

#include <echelon/layers/sequential.h>
#include <echelon/tensor/random.h>

namespace echelon::models {

std::shared_ptr<Sequential> lenet5(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                   Generator& gen);
std::shared_ptr<Sequential> alexnet(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                    Generator& gen);
std::shared_ptr<Sequential> vgg16(int64_t in_channels, int64_t num_classes, int64_t image_size,
                                  bool batch_norm, Generator& gen);
// depth = 6n + 2 (20, 32, 44, 56, 110).
std::shared_ptr<Sequential> resnet(int64_t depth, int64_t in_channels, int64_t num_classes,
                                   Generator& gen);

}  // namespace echelon::models
