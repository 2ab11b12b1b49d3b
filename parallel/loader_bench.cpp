#include <echelon/parallel/loader_bench.h>

#include <algorithm>
#include <chrono>

#include <echelon/base/error.h>
#include <echelon/data/echo.h>

namespace echelon::parallel {

namespace {

// Adds the rings' occupancy now to the running sums.
void sample_rings(const data::LoaderStats& s, std::vector<double>& sums,
                  std::vector<RingSample>& rings) {
  sums.resize(s.stages.size(), 0.0);
  rings.resize(s.stages.size());
  for (size_t i = 0; i < s.stages.size(); ++i) {
    sums[i] += static_cast<double>(s.stages[i].ring_occupancy);
    rings[i].max_occupancy = std::max(rings[i].max_occupancy, s.stages[i].ring_occupancy);
  }
}

}  // namespace

LoaderBenchResult run_loader_bench(std::shared_ptr<const data::Dataset> dataset,
                                   const LoaderBenchOptions& options) {
  ECH_CHECK(options.max_batches >= 0, "bench loader: max_batches must be >= 0 (got ",
            options.max_batches, ")");
  data::Loader loader(std::move(dataset), options.loader);
  LoaderBenchResult r;
  std::vector<double> sums;
  const auto start = std::chrono::steady_clock::now();
  loader.start_epoch(0);
  while (options.max_batches == 0 || r.batches < options.max_batches) {
    std::optional<data::Batch> batch = loader.next();
    if (!batch) break;
    sample_rings(loader.stats(), sums, r.rings);
    ++r.batches;
    r.items += batch->images.size(0);
    if (options.consume) options.consume(*batch);
  }
  r.stats = loader.stats();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  loader.request_stop();
  for (size_t i = 0; i < r.rings.size() && r.batches > 0; ++i)
    r.rings[i].mean_occupancy = sums[i] / static_cast<double>(r.batches);
  r.items_per_s = r.wall_s > 0 ? static_cast<double>(r.items) / r.wall_s : 0;
  data::AutoEcho echo;
  r.auto_echo = echo.update(r.stats.upstream_rate, r.stats.downstream_rate);
  return r;
}

json::Value LoaderBenchResult::to_json() const {
  json::Value rings_json = json::Value::array();
  for (size_t i = 0; i < rings.size() && i < stats.stages.size(); ++i)
    rings_json.push(json::Value::object()
                        .set("stage", stats.stages[i].name)
                        .set("mean_occupancy", rings[i].mean_occupancy)
                        .set("max_occupancy", rings[i].max_occupancy)
                        .set("capacity", stats.stages[i].ring_capacity));
  return json::Value::object()
      .set("benchmark", "loader")
      .set("batches", batches)
      .set("items", items)
      .set("wall_s", wall_s)
      .set("items_per_s", items_per_s)
      .set("auto_echo_factor", auto_echo)
      .set("rings", std::move(rings_json))
      .set("loader", stats.to_json());
}

}  // namespace echelon::parallel
