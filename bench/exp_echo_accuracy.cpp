// Experiment (d) of the data-echoing issue: fresh examples needed to reach a test accuracy target
// on Fashion-MNIST with LeNet-5 (SGD lr 0.01, momentum 0.9, batch 64; augmentation: random crop
// with padding 2 + horizontal flip), for each echo factor and placement.
//
// Usage (exp_echo_accuracy --help): exp_echo_accuracy SEED CELL... [--target 0.88] [--cap-epochs 6]
// [--eval-every 15000]
//                          [--subset 2000] [--shuffle-buffer 1024]
//   CELL = E:PLACEMENT, e.g. 1:after-augment 2:before-augment 4:batch
// Every --eval-every fresh examples the model is evaluated on the whole test set (or, with
// --subset N > 0, on its first N images: cheaper, but the first 2000 read ~1.5 points above the
// whole set); the run stops at the first evaluation >= --target and also reports the accuracy on
// the whole test set at that point.
// A run that has consumed --cap-epochs epochs of fresh examples stops as "not reached".
// One line per run (markdown table row) on stdout; progress on stderr.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/engine.h>

#include "bench/driver_args.h"

using namespace echelon;

namespace {

struct Config {
  uint64_t seed = 0;
  double target = 0.88;
  double cap_epochs = 6;
  int64_t eval_every = 15000;
  int64_t subset = 0;  // 0: evaluate on the whole test set
  int64_t shuffle_buffer = 1024;
};

struct Cell {
  double factor = 1;
  data::EchoPlacement placement = data::EchoPlacement::AfterAugment;
};

Cell parse_cell(const std::string& text) {
  const size_t colon = text.find(':');
  ECH_CHECK(colon != std::string::npos, "cell '", text, "' is not E:PLACEMENT");
  Cell cell;
  const std::string factor = text.substr(0, colon);
  char* end = nullptr;
  cell.factor = std::strtod(factor.c_str(), &end);
  ECH_CHECK(!factor.empty() && *end == '\0', "cell '", text, "': echo factor '", factor,
            "' is not a number");
  ECH_CHECK(cell.factor >= 1, "cell '", text, "': echo factor must be >= 1");
  cell.placement = data::parse_echo_placement(text.substr(colon + 1));
  return cell;
}

struct Sets {
  app::DataBundle full;                        // whole train and test splits
  std::shared_ptr<data::Dataset> test_subset;  // the first `subset` test images
};

Sets load_sets(int64_t subset) {
  app::TrainOptions options;
  options.data = "fashion-mnist";
  Sets sets{app::load_data(options), nullptr};
  sets.test_subset = sets.full.test;
  if (subset > 0) {
    options.limit_test = subset;
    sets.test_subset = app::load_data(options).test;
  }
  sets.full.train_augment.crop_padding = 2;
  sets.full.train_augment.horizontal_flip = true;
  return sets;
}

void run(const Sets& sets, const Cell& cell, const Config& config) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const app::DataBundle& data = sets.full;
  auto model = make_model("lenet5", data.channels, data.num_classes, config.seed, data.image_size);
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  auto engine = parallel::make_single_device_engine(model, sgd, Device::cpu());

  data::LoaderOptions options;
  options.batch_size = 64;
  options.seed = config.seed;
  options.workers = 1;  // one core for the whole run; also makes the data order reproducible
  options.echo_factor = cell.factor;
  options.echo_at = cell.placement;
  options.shuffle_buffer = config.shuffle_buffer;
  options.augment = data.train_augment;
  data::Loader loader(data.train, options);

  const auto cap =
      static_cast<int64_t>(config.cap_epochs * static_cast<double>(data.train->size()));
  int64_t fresh = 0, steps = 0, next_eval = config.eval_every;
  double accuracy = 0;
  bool reached = false;
  for (int64_t epoch = 0; !reached && fresh < cap; ++epoch) {
    model->train();
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      const parallel::StepStats stats = engine->train_step(*batch);
      ECH_CHECK(stats.finite, "non-finite loss at step ", steps);
      ++steps;
      fresh += batch->fresh;
      if (fresh < next_eval) continue;
      next_eval += config.eval_every;
      accuracy = app::evaluate(*engine, sets.test_subset, data.test_augment, 500, 1, Device::cpu())
                     .accuracy;
      std::fprintf(stderr, "  e=%g %s seed=%llu: %lld fresh, %lld steps, test acc %.4f\n",
                   cell.factor, data::echo_placement_name(cell.placement),
                   static_cast<unsigned long long>(config.seed), static_cast<long long>(fresh),
                   static_cast<long long>(steps), accuracy);
      if (accuracy >= config.target) {
        reached = true;
        break;
      }
      if (fresh >= cap) break;
    }
    engine->finish_epoch();
  }
  const double full_accuracy =
      sets.test_subset == data.test
          ? accuracy
          : app::evaluate(*engine, data.test, data.test_augment, 500, 1, Device::cpu()).accuracy;
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("| %g | %s | %llu | %s | %lld | %.4f | %.4f | %.0f |\n", cell.factor,
              data::echo_placement_name(cell.placement),
              static_cast<unsigned long long>(config.seed),
              reached ? std::to_string(fresh).c_str()
                      : ("not reached (" + std::to_string(fresh) + ")").c_str(),
              static_cast<long long>(steps), accuracy, full_accuracy, wall_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Config config;
  std::vector<std::string> cell_texts;
  CLI::App app{"Fresh examples to reach a test accuracy, per echo factor and placement",
               "exp_echo_accuracy"};
  app.option_defaults()->always_capture_default();
  app.add_option("seed", config.seed, "Seed of init, shuffling and augmentation")->required();
  app.add_option("cells", cell_texts, "E:PLACEMENT, e.g. 1:after-augment 2:before-augment 4:batch")
      ->required();
  app.add_option("--target", config.target, "Test accuracy to reach")->check(CLI::Range(0.0, 1.0));
  app.add_option("--cap-epochs", config.cap_epochs, "Give up after this many fresh epochs")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-every", config.eval_every, "Fresh examples between evaluations")
      ->check(CLI::PositiveNumber);
  app.add_option("--subset", config.subset, "Evaluate on the first N test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shuffle-buffer", config.shuffle_buffer, "Shuffle buffer after the echo")
      ->check(CLI::NonNegativeNumber);
  echelon::bench::parse_args_or_exit(app, argc, argv);
  try {
    std::vector<Cell> cells;
    for (const std::string& text : cell_texts) cells.push_back(parse_cell(text));
    const Sets sets = load_sets(config.subset);
    for (const Cell& cell : cells) run(sets, cell, config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exp_echo_accuracy: error: %s\n", echelon::message_of(e).c_str());
    return 1;
  }
  return 0;
}
