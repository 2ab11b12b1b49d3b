// Data echoing experiments (Choi et al. 2019), shared by `echelon reproduce echo` and the
// bench/exp_echo*.cpp drivers: see app/reproduce.h.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <echelon/app/reproduce.h>
#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/engine.h>

namespace echelon::app::reproduce {

namespace {

using Clock = std::chrono::steady_clock;

EchoSpeedRun echo_speed_once(double ratio, double factor, bool automatic, int steps,
                             double batch_ms) {
  constexpr int kBatch = 16, kWorkers = 2;
  // Consumer: kBatch items per batch_ms. Upstream: kWorkers workers, read cost t each, so
  // upstream rate = kWorkers / t = consumer rate / ratio.
  const double consumer_rate = kBatch / (batch_ms * 1e-3);
  data::SyntheticOptions synthetic;
  synthetic.size = 1 << 20;
  synthetic.height = synthetic.width = 8;
  synthetic.read_cost_us = kWorkers / (consumer_rate / ratio) * 1e6;
  data::LoaderOptions options;
  options.batch_size = kBatch;
  options.workers = kWorkers;
  options.shuffle_buffer = 64;
  if (automatic) {
    options.echo_auto = true;
  } else {
    options.echo_factor = factor;
  }
  data::Loader loader(data::make_synthetic_dataset(synthetic), options);
  const auto start = Clock::now();
  loader.start_epoch(0);
  EchoSpeedRun result;
  for (int step = 0; step < steps; ++step) {
    if (!loader.next()) break;
    if (step == 1) result.first_factor = loader.stats().factor;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(batch_ms));
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const data::LoaderStats stats = loader.stats();
  result.factor = stats.factor;
  result.measured_ratio = stats.measured_R;
  return result;  // the loader is destroyed mid-epoch: early stop
}

}  // namespace

EchoSpeedRun echo_speed(double ratio, double factor, bool automatic, int steps, double batch_ms,
                        int reps) {
  ECH_CHECK(ratio > 0 && steps > 0 && batch_ms > 0 && reps > 0,
            "echo_speed: ratio, steps, batch_ms and reps must be > 0");
  std::vector<EchoSpeedRun> runs;
  runs.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i)
    runs.push_back(echo_speed_once(ratio, factor, automatic, steps, batch_ms));
  std::sort(runs.begin(), runs.end(),
            [](const EchoSpeedRun& a, const EchoSpeedRun& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

EchoSets load_echo_sets(const EchoAccuracyConfig& config) {
  TrainOptions options;
  options.data = "fashion-mnist";
  options.data_dir = config.data_dir;
  options.limit_train = config.limit_train;
  EchoSets sets{load_data(options), nullptr};
  sets.test_subset = sets.full.test;
  if (config.test_subset > 0) {
    options.limit_test = config.test_subset;
    sets.test_subset = load_data(options).test;
  }
  sets.full.train_augment.crop_padding = 2;
  sets.full.train_augment.horizontal_flip = true;
  return sets;
}

EchoAccuracyRun echo_accuracy(const EchoSets& sets, double factor, data::EchoPlacement placement,
                              const EchoAccuracyConfig& config) {
  const auto start = Clock::now();
  const DataBundle& data = sets.full;
  auto model = make_model("lenet5", data.channels, data.num_classes, config.seed, data.image_size);
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  auto engine = parallel::make_single_device_engine(model, sgd, Device::cpu());

  data::LoaderOptions options;
  options.batch_size = 64;
  options.seed = config.seed;
  options.workers = 1;  // one core for the whole run; also makes the data order reproducible
  options.echo_factor = factor;
  options.echo_at = placement;
  options.shuffle_buffer = config.shuffle_buffer;
  options.augment = data.train_augment;
  data::Loader loader(data.train, options);

  const auto cap =
      static_cast<int64_t>(config.cap_epochs * static_cast<double>(data.train->size()));
  EchoAccuracyRun run;
  int64_t next_eval = config.eval_every;
  for (int64_t epoch = 0; !run.reached && run.fresh < cap; ++epoch) {
    model->train();
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      const parallel::StepStats stats = engine->train_step(*batch);
      ECH_CHECK(stats.finite, "non-finite loss at step ", run.steps);
      ++run.steps;
      run.fresh += batch->fresh;
      if (run.fresh < next_eval) continue;
      next_eval += config.eval_every;
      run.accuracy =
          evaluate(*engine, sets.test_subset, data.test_augment, 500, 1, Device::cpu()).accuracy;
      if (config.log) {
        *config.log << "  e=" << factor << " " << data::echo_placement_name(placement)
                    << " seed=" << config.seed << ": " << run.fresh << " fresh, " << run.steps
                    << " steps, test acc " << run.accuracy << std::endl;
      }
      if (run.accuracy >= config.target) {
        run.reached = true;
        break;
      }
      if (run.fresh >= cap) break;
    }
    engine->finish_epoch();
  }
  run.full_accuracy =
      sets.test_subset == data.test
          ? run.accuracy
          : evaluate(*engine, data.test, data.test_augment, 500, 1, Device::cpu()).accuracy;
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

}  // namespace echelon::app::reproduce
