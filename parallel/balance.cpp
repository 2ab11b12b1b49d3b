#include <echelon/parallel/balance.h>

#include <algorithm>
#include <limits>

#include <echelon/autograd/engine.h>
#include <echelon/base/error.h>
#include <echelon/layers/basic_block.h>
#include <echelon/layers/sequential.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Waits until the work the calling thread queued on `device` has run. CUDA launches return before
// the kernel runs, so a host clock read without this times the enqueue, not the layer.
void wait_for_device(const Device& device) {
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) ECH_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(device.index)));
#else
  (void)device;
#endif
}

// best[j][i]: the optimum over the first i layers cut into j parts; from[j][i]: where part j
// starts.
struct Table {
  std::vector<std::vector<double>> best;
  std::vector<std::vector<int64_t>> from;
  Table(int parts, int64_t layers)
      : best(parts + 1, std::vector<double>(layers + 1, kInf)),
        from(parts + 1, std::vector<int64_t>(layers + 1, -1)) {
    best[0][0] = 0;
  }
  std::vector<int64_t> cuts(int parts, int64_t layers) const {
    std::vector<int64_t> result(parts - 1);
    for (int j = parts, i = static_cast<int>(layers); j > 1; --j) {
      i = static_cast<int>(from[j][i]);
      result[j - 2] = i;
    }
    return result;
  }
};

// Cost of layers [s, e) from the prefix sums of the per-layer costs.
double segment(const std::vector<double>& prefix, int64_t s, int64_t e) {
  return prefix[e] - prefix[s];
}

// Phase 1: the least possible slowest partition over K parts (best[K][n] is that optimum).
Table least_slowest(const std::vector<double>& prefix, int K) {
  const int64_t n = static_cast<int64_t>(prefix.size()) - 1;
  Table slowest(K, n);
  for (int j = 1; j <= K; ++j) {
    for (int64_t i = j; i <= n; ++i) {
      for (int64_t s = j - 1; s < i; ++s) {
        const double candidate = std::max(slowest.best[j - 1][s], segment(prefix, s, i));
        if (candidate < slowest.best[j][i]) {
          slowest.best[j][i] = candidate;
          slowest.from[j][i] = s;
        }
      }
    }
  }
  return slowest;
}

// Phase 2: among splits whose every part costs at most `limit`, the cuts with the least memory
// weighted by the batches each partition holds (K - k); empty when no split fits.
std::vector<int64_t> least_memory(const std::vector<double>& prefix,
                                  const std::vector<size_t>& activation_bytes, int K,
                                  double limit) {
  const int64_t n = static_cast<int64_t>(prefix.size()) - 1;
  std::vector<double> bytes_prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) bytes_prefix[i + 1] = bytes_prefix[i] + activation_bytes[i];
  Table memory(K, n);
  for (int j = 1; j <= K; ++j) {
    for (int64_t i = j; i <= n; ++i) {
      for (int64_t s = j - 1; s < i; ++s) {
        if (segment(prefix, s, i) > limit || memory.best[j - 1][s] == kInf) continue;
        const double candidate =
            memory.best[j - 1][s] + (K - j + 1) * (bytes_prefix[i] - bytes_prefix[s]);
        if (candidate < memory.best[j][i]) {
          memory.best[j][i] = candidate;
          memory.from[j][i] = s;
        }
      }
    }
  }
  if (memory.best[K][n] == kInf) return {};
  return memory.cuts(K, n);
}

}  // namespace

BalanceResult balance_partitions(const std::vector<double>& cost, int num_partitions,
                                 const std::vector<size_t>& activation_bytes) {
  const int64_t n = static_cast<int64_t>(cost.size());
  const int K = num_partitions;
  ECH_CHECK(K >= 1 && K <= n, "auto balance: cannot cut ", n, " layers into ", K,
            " non-empty partitions");
  ECH_CHECK(activation_bytes.empty() || static_cast<int64_t>(activation_bytes.size()) == n,
            "auto balance: ", activation_bytes.size(), " memory entries for ", n, " layers");
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) {
    ECH_CHECK(cost[i] >= 0, "auto balance: layer ", i, " has negative cost ", cost[i]);
    prefix[i + 1] = prefix[i] + cost[i];
  }
  const Table slowest = least_slowest(prefix, K);
  std::vector<int64_t> cuts = slowest.cuts(K, n);
  if (!activation_bytes.empty()) {
    std::vector<int64_t> lean =
        least_memory(prefix, activation_bytes, K, slowest.best[K][n] * (1 + 1e-12));
    if (!lean.empty()) cuts = std::move(lean);  // (with K = 1 both are empty)
  }

  BalanceResult result;
  result.cuts = cuts;
  int64_t begin = 0;
  for (int k = 0; k < K; ++k) {
    const int64_t end = k + 1 < K ? cuts[k] : n;
    result.partition_cost.push_back(segment(prefix, begin, end));
    result.max_cost = std::max(result.max_cost, result.partition_cost.back());
    begin = end;
  }
  return result;
}

std::vector<LayerProfile> profile_layers(Sequential& model, const Tensor& sample, int repeats,
                                         int warmup) {
  ECH_CHECK(repeats >= 1 && warmup >= 0, "profile_layers: repeats must be >= 1, got ", repeats);
  const Device device = sample.device();
  const size_t n = model.size();
  std::vector<LayerProfile> profiles(n);
  std::vector<std::vector<double>> forward_times(n), backward_times(n);
  Generator gen(12345);
  // Times fn's forward on a fresh leaf made from x (so backward stops there), then its backward
  // from a random gradient; returns the output.
  const auto time_node = [&](const Tensor& x, bool leaf_grad, const auto& fn, double* forward_s,
                             double* backward_s) {
    Tensor input = x.detach();
    if (leaf_grad) input.set_requires_grad(true);
    Tensor output;
    *forward_s = time_once([&] { output = fn(input); }, device);
    const Tensor grad = ops::randn(output.shape(), gen, output.dtype(), output.device());
    *backward_s = output.requires_grad() ? time_once([&] { backward(output, grad); }, device) : 0;
    return output;
  };
  for (int round = 0; round < warmup + repeats; ++round) {
    std::vector<Tensor> inputs(n);
    std::vector<double> forward_s(n), backward_s(n);
    Tensor x = sample;
    for (size_t i = 0; i < n; ++i) {
      inputs[i] = x;
      const Tensor output = time_node(
          x, i > 0, [&](const Tensor& in) { return model.at(i)->forward(in); }, &forward_s[i],
          &backward_s[i]);
      profiles[i].activation_bytes = output.nbytes();
      x = output.detach();
    }
    // A pair the step runs as one fused node (Sequential::forward_from) costs less than its two
    // layers alone: time it as the step runs it and scale the two layers' times to its own,
    // keeping their proportions (a cut between the two unfuses them, and costs a little more).
    for (size_t i = 0; i < n; ++i) {
      if (!model.fuses_with_next(i, inputs[i])) continue;
      double pair_forward_s = 0, pair_backward_s = 0;
      size_t ran = 0;
      time_node(
          inputs[i], i > 0, [&](const Tensor& in) { return model.forward_from(i, in, &ran); },
          &pair_forward_s, &pair_backward_s);
      const auto scale = [&](std::vector<double>& s, double pair) {
        const double sum = s[i] + s[i + 1];
        if (sum <= 0) return;
        s[i] *= pair / sum;
        s[i + 1] *= pair / sum;
      };
      scale(forward_s, pair_forward_s);
      scale(backward_s, pair_backward_s);
      ++i;  // as forward_from walks: the pair's second layer starts no pair of its own
    }
    if (round < warmup) continue;
    for (size_t i = 0; i < n; ++i) {
      forward_times[i].push_back(forward_s[i]);
      backward_times[i].push_back(backward_s[i]);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    profiles[i].forward_time = summarize(forward_times[i]);
    profiles[i].backward_time = summarize(backward_times[i]);
    profiles[i].forward_s = profiles[i].forward_time.median_s;
    profiles[i].backward_s = profiles[i].backward_time.median_s;
  }
  model.zero_grad();
  // Nothing of the profile may still run when the caller hands the parameters to the stages'
  // own streams (which do not wait for this one): the gradients zeroed just now included.
  wait_for_device(device);
  return profiles;
}

void scale_pieces_to_blocks(const Sequential& model, const std::vector<LayerProfile>& whole,
                            std::vector<double>& cost) {
  size_t i = 0;
  for (size_t j = 0; j < model.size(); ++j) {
    const bool block = dynamic_cast<const BasicBlock*>(model.at(j).get()) != nullptr;
    const size_t pieces = block ? BlockPiece::kSteps : 1;
    ECH_CHECK(j < whole.size() && i + pieces <= cost.size(),
              "scale_pieces_to_blocks: ", whole.size(), " whole layers and ", cost.size(),
              " pieces do not fit layer ", j, " of a ", model.size(), "-layer model");
    double sum = 0;
    for (size_t k = i; k < i + pieces; ++k) sum += cost[k];
    if (block && sum > 0)
      for (size_t k = i; k < i + pieces; ++k) cost[k] *= whole[j].cost() / sum;
    i += pieces;
  }
  ECH_CHECK(i == cost.size() && whole.size() == model.size(),
            "scale_pieces_to_blocks: ", whole.size(), " whole layers and ", cost.size(),
            " pieces for a ", model.size(), "-layer model");
}

BalanceProfile profile_for_balance(Sequential& model, Sequential& layers, bool split_blocks,
                                   const Tensor& sample, int repeats, int warmup) {
  BalanceProfile profile;
  profile.layers = profile_layers(layers, sample, repeats, warmup);
  for (const LayerProfile& p : profile.layers) profile.cost.push_back(p.cost());
  if (split_blocks)
    scale_pieces_to_blocks(model, profile_layers(model, sample, repeats, warmup), profile.cost);
  return profile;
}

}  // namespace echelon::parallel
