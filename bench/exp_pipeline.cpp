// Pipeline-parallel experiments (bench/RESULTS.md, "Pipeline parallelism"), printed as markdown:
//   speed     images/s of the stale schedule on 2 CPU workers (one thread each, BLAS single-
//             threaded) over ordinary training on one worker; sequential/stash/gpipe beside it.
//   accuracy  Fashion-MNIST test accuracy: sequential vs stale at the paper's shallow cut vs a
//             deep cut vs hybrid vs stash vs gpipe (short schedules / subsets on a CPU).
//   memory    peak activation bytes of 4-stage pipelining over non-pipelined training at batch
//             128, beside Zhang & Abdelrahman 2019, Table 9.
//
// Usage: exp_pipeline [--quick] [--only speed|accuracy|memory] [--models a,b] [--repeat N]
//                     [--data DIR]
//        accuracy only: [--epochs N] [--train N] [--test N] [--batch N] [--lr X]
//                       [--warmup EPOCHS] [--seeds N] [--hybrid-switch X]
//                       [--schedules stale,deep,hybrid,stash,gpipe,predict]
// Run with OPENBLAS_NUM_THREADS=1 as well: the library is also told so at start-up.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <echelon/app/reproduce.h>
#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>

#include "bench/driver_args.h"

// OpenBLAS's own thread count (weak: absent without BLAS). Each partition must be one thread.

using namespace echelon;
using namespace echelon::parallel;
using namespace echelon::app::reproduce;

namespace {

struct Flags {
  bool quick = false;
  std::string only;                 // empty: every experiment
  std::vector<std::string> models;  // empty: the experiment's default list
  std::string data_dir = data::kDefaultFashionMnistDir;
  int repeat = 1;  // speed: rounds per engine, best kept
  // accuracy: overrides of the per-model defaults (0: keep), seeds, schedule filter
  int epochs = 0;
  int64_t train = 0, test = 0, batch = 0;
  double lr = 0, warmup = -1;
  int seeds = 1;
  double hybrid_switch = 0.5;
  // Empty: all. Drops are computed only when "sequential" (the baseline, run first) is listed.
  std::vector<std::string> schedules;
};

std::string fixed2x(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", value);
  return text;
}

bool wanted(const Flags& flags, const std::string& model) {
  return flags.models.empty() ||
         std::find(flags.models.begin(), flags.models.end(), model) != flags.models.end();
}

// ---- (a) speed -------------------------------------------------------------------------------

void run_speed(const Flags& flags) {
  std::printf(
      "\n### (a) Speed: 2 CPU workers vs 1 (images/s, batch 128, random 1x28x28 input, best of "
      "%d)\n\n",
      flags.repeat);
  std::printf(
      "| model | engine | cut (ppv) | images/s | speedup vs 1 worker | CPU s / wall s |"
      " balance bound |\n|---|---|---|---|---|---|---|\n");
  struct Case {
    std::string model;
    int warmup, timed;
  };
  const std::vector<Case> cases = flags.quick
                                      ? std::vector<Case>{{"lenet5", 2, 6}, {"resnet20", 1, 2}}
                                      : std::vector<Case>{{"lenet5", 5, 60}, {"resnet20", 2, 8}};
  for (const Case& c : cases) {
    if (!wanted(flags, c.model)) continue;
    // The stale run's DP cut (--balance auto) is reused by the others, so they compare one cut.
    // Rounds interleave the engines, and each keeps its best round: other load on a shared
    // machine only ever slows a run down.
    std::vector<SpeedRow> rows;
    for (int round = 0; round < flags.repeat; ++round) {
      std::vector<SpeedRow> now;
      now.push_back(measure_speed(c.model, "1 worker (ordinary training)",
                                  pipeline_options(ScheduleKind::Sequential, "", 1, false), 128,
                                  c.warmup, c.timed));
      const std::string cut = rows.empty() ? "" : rows[1].ppv;
      now.push_back(measure_speed(c.model, "2 workers, stale",
                                  pipeline_options(ScheduleKind::Stale, cut, 2, cut.empty()), 128,
                                  c.warmup, c.timed));
      for (auto [kind, label] : {std::pair{ScheduleKind::Stash, "2 workers, stash"},
                                 std::pair{ScheduleKind::GPipe, "2 workers, gpipe M=4"},
                                 std::pair{ScheduleKind::Sequential, "2 workers, sequential"}}) {
        now.push_back(measure_speed(c.model, label, pipeline_options(kind, now[1].ppv, 2, false),
                                    128, c.warmup, c.timed));
      }
      if (rows.empty()) rows = now;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (now[i].images_per_s > rows[i].images_per_s) rows[i] = now[i];
      }
    }
    const SpeedRow& base = rows[0];
    for (const SpeedRow& r : rows) {
      std::printf("| %s | %s | %s | %.1f | %.2fx | %.2f | %s |\n", c.model.c_str(), r.label.c_str(),
                  r.ppv.empty() ? "-" : r.ppv.c_str(), r.images_per_s,
                  r.images_per_s / base.images_per_s, r.cpu_per_wall,
                  r.ppv.empty() ? "-" : fixed2x(r.balance_bound).c_str());
    }
    std::fflush(stdout);
  }
}

// ---- (b) accuracy ----------------------------------------------------------------------------

double mean_of(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// Sample standard deviation; 0 for fewer than two values.
double sd_of(const std::vector<double>& values) {
  if (values.size() < 2) return 0;
  const double mean = mean_of(values);
  double sum = 0;
  for (double v : values) sum += (v - mean) * (v - mean);
  return std::sqrt(sum / static_cast<double>(values.size() - 1));
}

std::vector<AccuracyModel> accuracy_models(const Flags& flags) {
  std::vector<AccuracyModel> models = echelon::app::reproduce::accuracy_models();
  for (AccuracyModel& m : models) {
    if (flags.quick) {
      m.train = m.model == "lenet5" ? 4000 : 512;
      m.test = 500;
      m.epochs = 2;
    }
    if (flags.epochs > 0) m.epochs = flags.epochs;
    if (flags.train > 0) m.train = flags.train;
    if (flags.test > 0) m.test = flags.test;
    if (flags.batch > 0) m.batch = flags.batch;
    if (flags.lr > 0) m.lr = flags.lr;
    if (flags.warmup >= 0) m.warmup_epochs = flags.warmup;
  }
  return models;
}

void run_accuracy(const Flags& flags) {
  std::printf(
      "\n### (b) Fashion-MNIST test accuracy, 2 partitions (cosine LR; subsets: see columns)\n\n");
  std::printf(
      "| model | train / test examples | epochs | schedule | cut (ppv) | partition 0 | seed |"
      " train acc (last epoch) | test acc | time s |\n|---|---|---|---|---|---|---|---|---|---|\n");
  struct Summary {
    std::string model, label, ppv;
    double paper_drop;
    std::vector<double> test, drop;  // per seed: accuracy, points below sequential
  };
  std::vector<Summary> summaries;
  for (const AccuracyModel& m : accuracy_models(flags)) {
    if (!wanted(flags, m.model)) continue;
    const Split train = load_split(flags.data_dir, "train", m.train);
    const Split test = load_split(flags.data_dir, "test", m.test);
    const auto shape = make_model(m.model, 1, 10, 1, 28);
    const std::string shallow = std::to_string(m.shallow(*shape));
    const std::string deep = std::to_string(cut_before_classifier(*shape));
    struct Run {
      std::string key, label;
      ScheduleKind kind;
      std::string ppv;
      bool predict = false;
    };
    const std::vector<Run> all_runs = {
        {"sequential", "sequential", ScheduleKind::Sequential, ""},
        {"stale", "stale, shallow (paper ppv " + m.paper_ppv + ")", ScheduleKind::Stale, shallow},
        {"deep", "stale, deep", ScheduleKind::Stale, deep},
        {"hybrid", "hybrid (stale, then sequential)", ScheduleKind::Hybrid, shallow},
        {"stash", "stash (PipeDream), shallow", ScheduleKind::Stash, shallow},
        {"gpipe", "gpipe M=4, shallow", ScheduleKind::GPipe, shallow},
        {"predict", "stale + weight prediction, shallow", ScheduleKind::Stale, shallow, true}};
    std::vector<Run> runs;
    for (const Run& run : all_runs) {
      if (flags.schedules.empty() || std::find(flags.schedules.begin(), flags.schedules.end(),
                                               run.key) != flags.schedules.end()) {
        runs.push_back(run);
      }
    }
    const size_t first = summaries.size();
    for (const Run& run : runs)
      summaries.push_back({m.model, run.label, run.ppv, m.paper_drop, {}, {}});
    for (int seed = 0; seed < flags.seeds; ++seed) {
      double sequential_acc = -1;  // none: no drops
      for (size_t r = 0; r < runs.size(); ++r) {
        const Run& run = runs[r];
        PipelineOptions options = pipeline_options(run.kind, run.ppv, 1, false);
        options.hybrid_switch = flags.hybrid_switch;
        options.predict_weights = run.predict;
        const AccuracyResult result = train_and_test(m, options, train, test, seed);
        if (run.key == "sequential") sequential_acc = result.test_acc;
        Summary& summary = summaries[first + r];
        summary.test.push_back(100 * result.test_acc);
        if (sequential_acc >= 0) summary.drop.push_back(100 * (sequential_acc - result.test_acc));
        const int64_t cut =
            run.ppv.empty() ? static_cast<int64_t>(shape->size()) : std::stoll(run.ppv);
        std::printf("| %s | %lld / %lld | %d | %s | %s | %s | %d | %.4f | %.4f | %.0f |\n",
                    m.model.c_str(), static_cast<long long>(train.size()),
                    static_cast<long long>(test.size()), m.epochs, run.label.c_str(),
                    run.ppv.empty() ? "- (1 worker)" : run.ppv.c_str(),
                    run.ppv.empty() ? "whole model" : layer_names(*shape, 0, cut).c_str(), seed,
                    result.train_acc, result.test_acc, result.seconds);
        std::fflush(stdout);
      }
    }
  }
  std::printf(
      "\nSummary over seeds (drop = sequential minus this schedule, same seed, then averaged;"
      " hybrid switches at %g)\n\n",
      flags.hybrid_switch);
  std::printf(
      "| model | schedule | cut (ppv) | seeds | test acc %% mean | sd | drop (points) mean | sd |"
      " paper drop |\n|---|---|---|---|---|---|---|---|---|\n");
  for (const Summary& s : summaries) {
    char paper[16] = "-";
    if (s.label.rfind("stale, shallow", 0) == 0) {
      std::snprintf(paper, sizeof paper, "%.2f", s.paper_drop);
    }
    char drop[48] = "- | -";
    if (!s.drop.empty()) {
      std::snprintf(drop, sizeof drop, "%+.2f | %.2f", mean_of(s.drop), sd_of(s.drop));
    }
    std::printf("| %s | %s | %s | %zu | %.2f | %.2f | %s | %s |\n", s.model.c_str(),
                s.label.c_str(), s.ppv.empty() ? "-" : s.ppv.c_str(), s.test.size(),
                mean_of(s.test), sd_of(s.test), drop, paper);
  }
  std::fflush(stdout);
}

// ---- (c) memory ------------------------------------------------------------------------------

void run_memory(const Flags& flags) {
  const int64_t batch = flags.quick ? 32 : 128;
  std::printf("\n### (c) Activation memory of 4-stage pipelining vs non-pipelined, batch %lld\n\n",
              static_cast<long long>(batch));
  std::printf(
      "| model | 4-stage cut (ppv, DP) | non-pipelined MiB | stale MiB | stale increase |"
      " stash MiB | stash increase | total: stale / stash increase | paper (stale / PipeDream) |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string model : {"lenet5", "alexnet", "vgg16", "resnet20"}) {
    if (!wanted(flags, model)) continue;
    const MemoryRow row = measure_memory(model, batch);
    const size_t base = row.base, stale = row.stale, stash = row.stash;
    const std::string& cuts = row.cuts;
    const auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    const auto increase = [&](size_t b) {
      return 100.0 * (static_cast<double>(b) - static_cast<double>(base)) /
             static_cast<double>(base);
    };
    // "Total" adds the weight state every schedule holds once (parameters, gradients, momentum:
    // 3 x float32 per parameter) to the activations, closer to whole-process memory.
    const auto total_increase = [&](size_t b) {
      return 100.0 * (static_cast<double>(b) - static_cast<double>(base)) /
             static_cast<double>(base + row.weights);
    };
    std::printf("| %s | %s | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.0f%% / %.0f%% | %s |\n",
                model.c_str(), cuts.c_str(), mib(base), mib(stale), increase(stale), mib(stash),
                increase(stash), total_increase(stale), total_increase(stash),
                paper_memory_increase(model).c_str());
    std::fflush(stdout);
  }
}

Flags parse_flags(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Stale-weight pipelining: speed, activation memory and accuracy per schedule",
               "exp_pipeline"};
  app.option_defaults()->always_capture_default();
  app.add_flag("--quick", flags.quick, "Small sizes (minutes, for CI and a first look)");
  app.add_option("--only", flags.only, "One experiment: speed | accuracy | memory")
      ->check(CLI::IsMember({"speed", "accuracy", "memory"}));
  app.add_option("--models", flags.models, "Models, e.g. lenet5,resnet20 (default: per experiment)")
      ->delimiter(',');
  app.add_option("--repeat", flags.repeat, "Speed: rounds per engine, best kept")
      ->check(CLI::Range(1, 1000));
  app.add_option("--data", flags.data_dir, "Fashion-MNIST folder");
  app.add_option("--epochs", flags.epochs, "Accuracy: epochs (0: the model's default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--train", flags.train, "Accuracy: training examples (0: default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--test", flags.test, "Accuracy: test examples (0: default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch", flags.batch, "Accuracy: batch size (0: default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--lr", flags.lr, "Accuracy: learning rate (0: default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", flags.warmup, "Accuracy: LR warm-up epochs (-1: default)")
      ->check(CLI::Range(-1.0, 1000.0));
  app.add_option("--seeds", flags.seeds, "Accuracy: seeds per schedule")
      ->check(CLI::Range(1, 1000));
  app.add_option("--hybrid-switch", flags.hybrid_switch,
                 "Hybrid: epoch (>= 1) or fraction of epochs (< 1)")
      ->check(CLI::PositiveNumber);
  app.add_option("--schedules", flags.schedules,
                 "Accuracy: sequential,stale,deep,hybrid,stash,gpipe,predict (default: all)")
      ->delimiter(',')
      ->check(
          CLI::IsMember({"sequential", "stale", "deep", "hybrid", "stash", "gpipe", "predict"}));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  return flags;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Flags flags = parse_flags(argc, argv);
    ops::set_cpu_threads(1);
    const char* env = std::getenv("OPENBLAS_NUM_THREADS");
    std::printf("exp_pipeline%s: OPENBLAS_NUM_THREADS=%s, BLAS threads set to 1: %s\n",
                flags.quick ? " --quick" : "", env ? env : "(unset)",
                ops::cpu_threads() == 1 ? "yes" : "no BLAS");
    if (flags.only.empty() || flags.only == "speed") run_speed(flags);
    if (flags.only.empty() || flags.only == "memory") run_memory(flags);
    if (flags.only.empty() || flags.only == "accuracy") run_accuracy(flags);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exp_pipeline: error: %s\n", echelon::message_of(e).c_str());
    return 1;
  }
}
