// `echelon bench loader`: one epoch (or its first batches) of the data loader, with the
// consumer either idle or running a callback (a training step), reporting every stage's items/s,
// the upstream (fresh) and downstream (consumer) rates, the rings' occupancy sampled at every
// batch, and the echo factor that --echo auto would settle on for this ratio.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/data/loader.h>

namespace echelon::parallel {

struct LoaderBenchOptions {
  data::LoaderOptions loader;
  int64_t max_batches = 0;  // 0: the whole epoch
  // Called with every batch (a training step, a sleep); empty: the consumer takes batches as
  // fast as the loader makes them.
  std::function<void(const data::Batch&)> consume;
};

struct RingSample {
  double mean_occupancy = 0;  // items waiting in the stage's output ring, over the samples
  int64_t max_occupancy = 0;
};

struct LoaderBenchResult {
  data::LoaderStats stats;        // at the end of the measured batches
  std::vector<RingSample> rings;  // one per stats.stages entry
  int64_t batches = 0, items = 0;
  double wall_s = 0;
  double items_per_s = 0;  // items the consumer received per second
  double auto_echo = 1;    // what --echo auto converges to: clamp(downstream / upstream, 1, 8)
  json::Value to_json() const;
};

LoaderBenchResult run_loader_bench(std::shared_ptr<const data::Dataset> dataset,
                                   const LoaderBenchOptions& options);

}  // namespace echelon::parallel
