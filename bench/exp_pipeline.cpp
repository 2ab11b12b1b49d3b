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
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

#include "bench/driver_args.h"

// OpenBLAS's own thread count (weak: absent without BLAS). Each partition must be one thread.

using namespace echelon;
using namespace echelon::parallel;

namespace {

using Clock = std::chrono::steady_clock;

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

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // every thread of the process
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string fixed2x(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", value);
  return text;
}

bool wanted(const Flags& flags, const std::string& model) {
  return flags.models.empty() ||
         std::find(flags.models.begin(), flags.models.end(), model) != flags.models.end();
}

// ---- data ------------------------------------------------------------------------------------

struct Split {
  Tensor images;  // (N, 1, 28, 28) float32, normalised
  Tensor labels;  // (N) int64
  int64_t size() const { return labels.size(0); }
};

// The first `limit` examples of a Fashion-MNIST split (the files are already shuffled), scaled
// to [0, 1] and normalised with the training set's mean and standard deviation.
Split load_split(const std::string& dir, const std::string& split, int64_t limit) {
  data::LabeledImages set = data::load_fashion_mnist(dir, split);
  const int64_t n = std::min(limit, set.labels.size(0));
  constexpr double kMean = 0.2860, kStd = 0.3530;
  Split out;
  Tensor pixels = set.images.narrow(0, 0, n).contiguous().to(kFloat32);
  out.images = ops::add(ops::mul(pixels, 1.0 / (255.0 * kStd)), -kMean / kStd);
  out.labels = set.labels.narrow(0, 0, n).contiguous();
  return out;
}

// Mini-batches of one epoch in a seeded random order (the last one may be smaller).
std::vector<data::Batch> epoch_batches(const Split& split, int64_t batch_size, uint64_t seed) {
  Generator gen(seed);
  const Tensor order = ops::randperm(split.size(), gen);
  std::vector<data::Batch> batches;
  for (int64_t begin = 0, index = 0; begin < split.size(); begin += batch_size, ++index) {
    const int64_t size = std::min(batch_size, split.size() - begin);
    const Tensor idx = order.narrow(0, begin, size).contiguous();
    data::Batch batch;
    batch.images = ops::index_select(split.images, 0, idx);
    batch.labels = ops::index_select(split.labels, 0, idx);
    batch.fresh = size;
    batch.index = index;
    batches.push_back(std::move(batch));
  }
  return batches;
}

// Random images and labels: the speed and memory experiments do not depend on the pixels.
std::vector<data::Batch> random_batches(int count, int64_t batch_size, uint64_t seed) {
  Generator gen(seed);
  std::vector<data::Batch> batches;
  for (int i = 0; i < count; ++i) {
    data::Batch batch;
    batch.images = ops::randn({batch_size, 1, 28, 28}, gen);
    batch.labels = ops::cast(ops::mul(ops::rand({batch_size}, gen), 9.999), kInt64);
    batch.fresh = batch_size;
    batch.index = i;
    batches.push_back(std::move(batch));
  }
  return batches;
}

// ---- engine helpers --------------------------------------------------------------------------

PipelineOptions pipeline_options(ScheduleKind schedule, const std::string& ppv, int partitions,
                                 bool balance, int micro_batches = 4) {
  PipelineOptions o;
  o.schedule = schedule;
  o.ppv = ppv;
  o.partitions = partitions;
  o.balance_auto = balance;
  o.micro_batches = micro_batches;
  o.hybrid_switch = 1;  // hybrid: stale for the first epoch, sequential afterwards
  return o;
}

SGDOptions sgd_config(double lr) {
  SGDOptions sgd;
  sgd.lr = lr;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  return sgd;
}

// The flat index just after the n-th layer named `name` (n from 1): the paper counts layers
// with their activation fused, so its ppv maps to such a boundary of our flat model.
int64_t cut_after(const Sequential& model, const std::string& name, int n) {
  int seen = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    if (model.layers()[i]->name() == name && ++seen == n) return static_cast<int64_t>(i) + 1;
  }
  ECH_FAIL("exp_pipeline: the model has fewer than ", n, " ", name, " layers");
}

// Everything but the classifier (the last Linear) in partition 0: a deep cut.
int64_t cut_before_classifier(const Sequential& model) {
  for (size_t i = model.size(); i-- > 0;) {
    if (model.layers()[i]->name() == "Linear") return static_cast<int64_t>(i);
  }
  ECH_FAIL("exp_pipeline: the model has no Linear layer");
}

std::string layer_names(const Sequential& model, int64_t begin, int64_t end) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (int64_t i = begin; i < end; ++i) {
    const std::string name = model.layers()[i]->name();
    if (counts[name]++ == 0) order.push_back(name);
  }
  std::ostringstream out;
  for (size_t i = 0; i < order.size(); ++i) {
    out << (i ? " " : "") << counts[order[i]] << "x" << order[i];
  }
  return out.str();
}

// ---- (a) speed -------------------------------------------------------------------------------

struct SpeedRow {
  std::string label;
  double images_per_s = 0, cpu_per_wall = 0, balance_bound = 0;
  std::string ppv;
};

SpeedRow measure_speed(const std::string& model_name, const std::string& label,
                       PipelineOptions options, int64_t batch_size, int warmup, int timed) {
  auto model = make_model(model_name, 1, 10, 1, 28);
  PipelineEngine engine(model, sgd_config(0.01), Device::cpu(), options);
  for (const auto& batch : random_batches(warmup, batch_size, 7)) engine.train_step(batch);
  engine.finish_epoch();
  const std::vector<data::Batch> batches = random_batches(timed, batch_size, 8);
  std::vector<double> busy_before;
  for (const PartitionStats& s : engine.partition_stats()) busy_before.push_back(s.busy_s);
  const double cpu0 = cpu_seconds();
  const auto start = Clock::now();
  for (const auto& batch : batches) engine.train_step(batch);
  engine.finish_epoch();
  const double wall = seconds_since(start);
  SpeedRow row;
  row.label = label;
  row.images_per_s = static_cast<double>(timed * batch_size) / wall;
  row.cpu_per_wall = (cpu_seconds() - cpu0) / wall;
  // Sum of the partitions' compute over the slowest one: the speedup a perfect pipeline of
  // these partitions could reach with one core each.
  double total = 0, slowest = 0;
  const auto stats = engine.partition_stats();
  for (size_t k = 0; k < stats.size(); ++k) {
    const double busy = stats[k].busy_s - busy_before[k];
    total += busy;
    slowest = std::max(slowest, busy);
  }
  row.balance_bound = slowest > 0 ? total / slowest : 0;
  row.ppv = format_ppv(engine.cuts());
  return row;
}

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

struct AccuracyModel {
  std::string model;
  std::string paper_ppv;  // the paper's shallow placement, in its layer counting
  double paper_drop;      // the paper's accuracy drop (points) at that placement
  std::function<int64_t(const Sequential&)> shallow;
  int64_t train, test;  // examples used
  int epochs;
  int64_t batch;
  double lr;                 // peak of the cosine schedule
  double warmup_epochs = 0;  // linear warm-up from 0 to lr
};

struct AccuracyResult {
  double train_acc = 0, test_acc = 0, seconds = 0;
};

// Trains with a cosine LR (peak m.lr, to 0 at the end, set every step) and tests the final
// weights. `seed` picks the initial weights and the order of the examples.
AccuracyResult train_and_test(const AccuracyModel& m, PipelineOptions options, const Split& train,
                              const Split& test, uint64_t seed) {
  options.total_epochs = m.epochs;
  auto model = make_model(m.model, 1, 10, 1 + seed, 28);
  PipelineEngine engine(model, sgd_config(m.lr), Device::cpu(), options);
  LrScheduleOptions lr;
  lr.kind = "cosine";
  lr.base_lr = m.lr;
  lr.total_epochs = m.epochs;
  lr.warmup_epochs = m.warmup_epochs;
  const std::shared_ptr<LrSchedule> schedule = make_lr_schedule(lr);
  const auto start = Clock::now();
  StepStats last_epoch;
  for (int epoch = 0; epoch < m.epochs; ++epoch) {
    last_epoch = {};
    const auto batches = epoch_batches(train, m.batch, 100 + 1000 * seed + epoch);
    for (size_t step = 0; step < batches.size(); ++step) {
      engine.set_lr(
          schedule->lr_at(epoch, static_cast<int64_t>(step), static_cast<int64_t>(batches.size())));
      last_epoch.add(engine.train_step(batches[step]));
    }
    last_epoch.add(engine.finish_epoch());
    ECH_CHECK(last_epoch.finite, "exp_pipeline: ", m.model, " diverged (non-finite loss)");
  }
  AccuracyResult result;
  result.seconds = seconds_since(start);
  result.train_acc = last_epoch.accuracy();
  int64_t correct = 0;
  for (int64_t begin = 0; begin < test.size(); begin += 500) {
    const int64_t n = std::min<int64_t>(500, test.size() - begin);
    const Tensor logits = engine.predict(test.images.narrow(0, begin, n).contiguous());
    correct += correct_count(logits, test.labels.narrow(0, begin, n).contiguous());
  }
  result.test_acc = static_cast<double>(correct) / static_cast<double>(test.size());
  return result;
}

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
  const auto after = [](const char* name, int n) {
    return [name = std::string(name), n](const Sequential& s) { return cut_after(s, name, n); };
  };
  std::vector<AccuracyModel> models = {
      {"lenet5", "2", 0.4, after("MaxPool2d", 1), 60000, 10000, 8, 128, 0.05},
      {"alexnet", "3", 4.0, after("LocalResponseNorm", 1), 8000, 10000, 4, 128, 0.01},
      {"vgg16_bn", "2", 0.83, after("ReLU", 2), 2000, 2000, 4, 64, 0.02},
      {"resnet20", "7", 1.45, after("BasicBlock", 3), 5000, 5000, 4, 128, 0.05}};
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

size_t total_peak(const PipelineEngine& engine) {
  size_t bytes = 0;
  for (const PartitionStats& s : engine.partition_stats()) bytes += s.peak_bytes;
  return bytes;
}

size_t run_for_memory(const std::string& model_name, PipelineOptions options,
                      const std::vector<data::Batch>& batches, std::string* cuts) {
  PipelineEngine engine(make_model(model_name, 1, 10, 1, 28), sgd_config(0.01), Device::cpu(),
                        options);
  for (const auto& batch : batches) engine.train_step(batch);
  engine.finish_epoch();
  if (cuts) *cuts = format_ppv(engine.cuts());
  return total_peak(engine);
}

void run_memory(const Flags& flags) {
  const int64_t batch = flags.quick ? 32 : 128;
  std::printf("\n### (c) Activation memory of 4-stage pipelining vs non-pipelined, batch %lld\n\n",
              static_cast<long long>(batch));
  std::printf(
      "| model | 4-stage cut (ppv, DP) | non-pipelined MiB | stale MiB | stale increase |"
      " stash MiB | stash increase | total: stale / stash increase | paper (stale / PipeDream) |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  const std::map<std::string, std::string> paper = {{"lenet5", "97% / 109%"},
                                                    {"alexnet", "37% / 214%"},
                                                    {"vgg16", "75% / 124%"},
                                                    {"resnet20", "60% / 61%"}};
  for (const std::string model : {"lenet5", "alexnet", "vgg16", "resnet20"}) {
    if (!wanted(flags, model)) continue;
    // 5 mini-batches: partition 0 holds K = 4 of them at once in the stale and stash schedules.
    const auto batches = random_batches(5, batch, 9);
    const size_t base = run_for_memory(
        model, pipeline_options(ScheduleKind::Sequential, "", 1, false), batches, nullptr);
    std::string cuts;
    const size_t stale =
        run_for_memory(model, pipeline_options(ScheduleKind::Stale, "", 4, true), batches, &cuts);
    const size_t stash = run_for_memory(
        model, pipeline_options(ScheduleKind::Stash, cuts, 4, false), batches, nullptr);
    const auto mib = [](size_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
    const auto increase = [&](size_t b) {
      return 100.0 * (static_cast<double>(b) - static_cast<double>(base)) /
             static_cast<double>(base);
    };
    // "Total" adds the weight state every schedule holds once (parameters, gradients, momentum:
    // 3 x float32 per parameter) to the activations, closer to whole-process memory.
    const size_t weights = 3 * sizeof(float) * make_model(model, 1, 10, 1, 28)->num_parameters();
    const auto total_increase = [&](size_t b) {
      return 100.0 * (static_cast<double>(b) - static_cast<double>(base)) /
             static_cast<double>(base + weights);
    };
    std::printf("| %s | %s | %.1f | %.1f | %.0f%% | %.1f | %.0f%% | %.0f%% / %.0f%% | %s |\n",
                model.c_str(), cuts.c_str(), mib(base), mib(stale), increase(stale), mib(stash),
                increase(stash), total_increase(stale), total_increase(stash),
                paper.at(model).c_str());
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
