// Tutorial 6: a 2-partition pipeline with stale weights (parallel/pipeline.h).
//
// PipelineEngine cuts a flat Sequential into partitions (parallel/partition.h), gives each a
// Stage (parallel/stage.h) on its own executor thread with its own SGD over its own parameters,
// and joins them with transports (parallel/transport.h: on the CPU a lock-free ring; the tensor
// handle moves). Every stage follows one rule, next_op (parallel/schedule.h): with fewer than
// `window` mini-batches between forward and backward, forward the next one, otherwise backward
// the oldest (1F1B). The stale schedule (Zhang & Abdelrahman 2019) gives partition k of K the
// window K - k and updates after every backward WITHOUT stashing weights: autograd saved
// references to the parameters, so a backward reads whatever the weights are by then. Partition 0
// therefore computes its gradient on weights one update newer than its forward saw (staleness
// K - 1 - k = 1); the last partition has none. The engine measures this, per mini-batch.
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/echelon.h>

using namespace echelon;

int main() {
  Generator gen(11);
  // A flat model of 6 layers; the pipeline cuts it at layer 3: [0, 3) and [3, 6).
  auto model = std::make_shared<Sequential>();
  model->push_back(std::make_shared<Flatten>());           // (B, 1, 2, 4) -> (B, 8)
  model->push_back(std::make_shared<Linear>(8, 32, gen));  // -> (B, 32)
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<Linear>(32, 32, gen));  // partition 1 starts here
  model->push_back(std::make_shared<ReLU>());
  model->push_back(std::make_shared<Linear>(32, 4, gen));  // -> (B, 4) logits

  parallel::PipelineOptions options;
  options.ppv = "3";  // partition starts: like --ppv 3 on the command line
  options.schedule = parallel::ScheduleKind::Stale;
  parallel::PipelineEngine engine(model, SGDOptions{.lr = 0.05, .momentum = 0.9}, Device::cpu(),
                                  options);

  // A fixed task: the class is the index of the largest of the first 4 inputs.
  const int64_t b = 32, steps = 60;
  double first_loss = 0, last_loss = 0;
  int64_t completed = 0, empty_calls = 0;
  for (int64_t step = 0; step < steps; ++step) {
    data::Batch batch;
    batch.images = ops::randn({b, 1, 2, 4}, gen);  // (B, C, H, W) like the loader's batches
    batch.labels = ops::argmax(batch.images.reshape({b, 8}).narrow(1, 0, 4), 1);  // (B) int64
    batch.index = step;
    // train_step hands the batch to partition 0 and returns the mini-batches whose loss the
    // last partition computed meanwhile: the partitions run on their own threads, so a call
    // may return none (always while the pipeline fills) and a later one several.
    const parallel::StepStats stats = engine.train_step(batch);
    if (stats.batches == 0) ++empty_calls;
    completed += stats.batches;
    if (stats.batches > 0 && first_loss == 0) first_loss = stats.mean_loss();
    if (stats.batches > 0) last_loss = stats.mean_loss();
  }
  // Drain: every mini-batch still in flight finishes its backward and update.
  completed += engine.finish_epoch().batches;

  const std::vector<parallel::PartitionStats> partitions = engine.partition_stats();
  bool ok = engine.cuts() == std::vector<int64_t>{3} && partitions.size() == 2 &&
            completed == steps && std::isfinite(last_loss) && last_loss < 0.7 * first_loss;
  for (const parallel::PartitionStats& p : partitions) {
    const int64_t analytic =
        parallel::analytic_staleness(parallel::ScheduleKind::Stale, 2, p.partition);
    std::printf("partition %d: layers [%lld, %lld), %lld forwards, %lld updates, staleness ",
                p.partition, static_cast<long long>(p.layers.begin),
                static_cast<long long>(p.layers.end), static_cast<long long>(p.forwards),
                static_cast<long long>(p.updates));
    for (const auto& [staleness, count] : p.staleness)
      std::printf("%lld x%lld ", static_cast<long long>(staleness), static_cast<long long>(count));
    std::printf("(analytic %lld)\n", static_cast<long long>(analytic));
    // Every backward of partition 0 but the first reads weights 1 update newer than its forward.
    ok = ok && p.updates == steps && p.max_staleness() == analytic;
  }
  std::printf("%lld of %lld calls returned no finished mini-batch; loss %.4f -> %.4f\n",
              static_cast<long long>(empty_calls), static_cast<long long>(steps), first_loss,
              last_loss);
  std::printf("%s\n", ok ? "stale pipeline trained" : "pipeline check FAILED");
  return ok ? 0 : 1;
}
