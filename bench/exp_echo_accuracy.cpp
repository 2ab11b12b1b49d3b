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
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <echelon/app/reproduce.h>
#include <echelon/base/error.h>

#include "bench/driver_args.h"

using namespace echelon;
using namespace echelon::app::reproduce;

namespace {

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

void run(const EchoSets& sets, const Cell& cell, const EchoAccuracyConfig& config) {
  const EchoAccuracyRun r = echo_accuracy(sets, cell.factor, cell.placement, config);
  std::printf("| %g | %s | %llu | %s | %lld | %.4f | %.4f | %.0f |\n", cell.factor,
              data::echo_placement_name(cell.placement),
              static_cast<unsigned long long>(config.seed),
              r.reached ? std::to_string(r.fresh).c_str()
                        : ("not reached (" + std::to_string(r.fresh) + ")").c_str(),
              static_cast<long long>(r.steps), r.accuracy, r.full_accuracy, r.seconds);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  EchoAccuracyConfig config;
  config.log = &std::cerr;
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
  app.add_option("--subset", config.test_subset, "Evaluate on the first N test images (0: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--shuffle-buffer", config.shuffle_buffer, "Shuffle buffer after the echo")
      ->check(CLI::NonNegativeNumber);
  echelon::bench::parse_args_or_exit(app, argc, argv);
  try {
    std::vector<Cell> cells;
    for (const std::string& text : cell_texts) cells.push_back(parse_cell(text));
    const EchoSets sets = load_echo_sets(config);
    for (const Cell& cell : cells) run(sets, cell, config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exp_echo_accuracy: error: %s\n", echelon::message_of(e).c_str());
    return 1;
  }
  return 0;
}
