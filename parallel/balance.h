// --balance auto: choose the cut points that minimise the slowest partition. The cost of a
// partition is the sum of its layers' forward+backward times (profiled), so the pipeline's
// steady-state cycle is the maximum over partitions; the activation memory each layer saves is
// profiled too and breaks ties (less memory in early partitions, which hold the most batches).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <echelon/parallel/timing.h>
#include <echelon/tensor/tensor.h>

namespace echelon {
class Sequential;
}

namespace echelon::parallel {

struct LayerProfile {
  double forward_s = 0;  // seconds per mini-batch (the median of forward_time)
  double backward_s = 0;
  size_t activation_bytes = 0;              // the layer's output, held until its backward
  TimingStats forward_time, backward_time;  // the spread, for the per-layer benchmark
  double cost() const { return forward_s + backward_s; }
};

struct BalanceResult {
  std::vector<int64_t> cuts;           // placement vector (see partition.h)
  std::vector<double> partition_cost;  // summed layer cost per partition
  double max_cost = 0;                 // the slowest partition
};

// Exact minimum of max(partition cost) over all contiguous splits of `cost` into num_partitions
// non-empty parts (dynamic programming, O(K n^2)). Among optimal splits, prefers the one with the
// least activation memory weighted by how many mini-batches each partition holds (K - k).
BalanceResult balance_partitions(const std::vector<double>& cost, int num_partitions,
                                 const std::vector<size_t>& activation_bytes = {});

// Times each layer's forward and backward on `sample` (N, ...) after `warmup` untimed rounds,
// taking the median of `repeats` (and their spread); the model's parameter gradients are cleared
// afterwards. A pair the step fuses (Sequential::fuses_with_next: BatchNorm + ReLU, ReLU +
// MaxPool2d, Conv2d + ReLU) is also timed as one node, and its two layers' times scaled to sum to
// that. On CUDA the work runs on the calling thread's current stream, which is synchronised before
// every clock read (wall time of the layer's launches and kernels) and once more before returning,
// so no profiling work is still in flight when the caller hands the model to other streams.
std::vector<LayerProfile> profile_layers(Sequential& model, const Tensor& sample, int repeats = 3,
                                         int warmup = 1);

// cost: per layer of model's --split-blocks view (Sequential::with_split_blocks). Each block's
// pieces were timed with the cat and split copies between them, which only a block that a cut
// falls in pays (the pieces of one partition are joined); the copies cost most in the early,
// large blocks, so the plain sums would move every cut towards the input. Scales each block's
// piece costs to sum to the block's own time, whole[j] (model's profile), keeping their
// proportions. Throws when the sizes do not fit model.
void scale_pieces_to_blocks(const Sequential& model, const std::vector<LayerProfile>& whole,
                            std::vector<double>& cost);

// What --balance auto weighs: each layer of `layers` (model itself, or its --split-blocks view)
// profiled, and its cost (forward + backward; a block's pieces scaled by scale_pieces_to_blocks,
// which profiles the whole model as well). `echelon bench model --per-layer` shows the same.
struct BalanceProfile {
  std::vector<LayerProfile> layers;
  std::vector<double> cost;
};
BalanceProfile profile_for_balance(Sequential& model, Sequential& layers, bool split_blocks,
                                   const Tensor& sample, int repeats = 3, int warmup = 1);

}  // namespace echelon::parallel
