// Cutting a flat model into pipeline partitions. A placement vector ("--ppv 2,5") lists the layer
// indices where a new partition starts: with 8 layers, "2,5" gives [0,2) [2,5) [5,8).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/tensor/device.h>

namespace echelon {
class Sequential;
}

namespace echelon::parallel {

struct LayerRange {
  int64_t begin = 0, end = 0;  // [begin, end)
  bool operator==(const LayerRange&) const = default;
};

// "2,5" -> {2, 5}. Throws naming the text on empty items, non-numbers and non-increasing cuts.
std::vector<int64_t> parse_ppv(const std::string& text);
std::string format_ppv(const std::vector<int64_t>& cuts);  // {2, 5} -> "2,5"

// "cuda:0,cuda:1" -> one device per partition. N devices for K partitions: N = K places one
// partition on each; N dividing K places K/N neighbouring partitions on each device (GPipe's
// placement when stages outnumber GPUs). Throws naming the text on empty or unknown entries and
// on counts that do not divide K.
std::vector<Device> parse_partition_devices(const std::string& text, int partitions);

// Cut points -> one range per partition. Every cut must lie in (0, num_layers), strictly rising,
// so that no partition is empty.
std::vector<LayerRange> ranges_from_cuts(const std::vector<int64_t>& cuts, int64_t num_layers);

// K partitions of near-equal layer count: the default placement when neither --ppv nor
// --balance is given.
std::vector<int64_t> even_cuts(int64_t num_layers, int num_partitions);

// Partitions sharing the model's layer objects (Sequential::slice), so the full model stays
// usable for evaluation and checkpoints. In a --split-blocks view, the pieces of a block that fall
// in one partition are joined back (Sequential::join_split_blocks).
std::vector<std::shared_ptr<Sequential>> split_model(const Sequential& model,
                                                     const std::vector<int64_t>& cuts);

}  // namespace echelon::parallel
