// Stale-weight pipelining experiments (Zhang & Abdelrahman 2019), shared by `echelon reproduce
// pipeline` and bench/exp_pipeline.cpp: see app/reproduce.h.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>
#include <utility>

#include <echelon/app/reproduce.h>
#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

namespace echelon::app::reproduce {

using namespace echelon::parallel;

namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);  // every thread of the process
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
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

size_t total_peak(const PipelineEngine& engine) {
  size_t bytes = 0;
  for (const PartitionStats& s : engine.partition_stats()) bytes += s.peak_bytes;
  return bytes;
}

size_t run_for_memory(const std::string& model_name, PipelineOptions options,
                      const std::vector<data::Batch>& batches, std::string* cuts) {
  PipelineEngine engine(make_model(model_name, 1, 10, 1, 28), sgd_config(0.01), Device::cpu(),
                        std::move(options));
  for (const auto& batch : batches) engine.train_step(batch);
  engine.finish_epoch();
  if (cuts) *cuts = format_ppv(engine.cuts());
  return total_peak(engine);
}

}  // namespace

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

PipelineOptions pipeline_options(ScheduleKind schedule, const std::string& ppv, int partitions,
                                 bool balance, int micro_batches) {
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

SpeedRow measure_speed(const std::string& model_name, const std::string& label,
                       PipelineOptions options, int64_t batch_size, int warmup, int timed) {
  auto model = make_model(model_name, 1, 10, 1, 28);
  PipelineEngine engine(model, sgd_config(0.01), Device::cpu(), std::move(options));
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

std::vector<AccuracyModel> accuracy_models() {
  const auto after = [](const char* name, int n) {
    return [name = std::string(name), n](const Sequential& s) { return cut_after(s, name, n); };
  };
  // Paper drops: Zhang & Abdelrahman's abstract (LeNet-5 0.4, AlexNet 4, VGG-16 0.83, ResNet-20
  // 1.45 points); their ppv counts a layer with its activation and pooling.
  return {{"lenet5", "2", 0.4, after("MaxPool2d", 1), 60000, 10000, 8, 128, 0.05},
          {"alexnet", "3", 4.0, after("LocalResponseNorm", 1), 8000, 10000, 4, 128, 0.01},
          {"vgg16_bn", "2", 0.83, after("ReLU", 2), 2000, 2000, 4, 64, 0.02},
          {"resnet20", "7", 1.45, after("BasicBlock", 3), 5000, 5000, 4, 128, 0.05}};
}

MemoryRow measure_memory(const std::string& model, int64_t batch) {
  // 5 mini-batches: partition 0 holds K = 4 of them at once in the stale and stash schedules.
  const auto batches = random_batches(5, batch, 9);
  MemoryRow row;
  row.base = run_for_memory(model, pipeline_options(ScheduleKind::Sequential, "", 1, false),
                            batches, nullptr);
  row.stale =
      run_for_memory(model, pipeline_options(ScheduleKind::Stale, "", 4, true), batches, &row.cuts);
  row.stash = run_for_memory(model, pipeline_options(ScheduleKind::Stash, row.cuts, 4, false),
                             batches, nullptr);
  row.weights = 3 * sizeof(float) * make_model(model, 1, 10, 1, 28)->num_parameters();
  return row;
}

std::string paper_memory_increase(const std::string& model) {
  // Table 9 of the paper, as bench/exp_pipeline has cited it since the first pipeline session.
  static const std::map<std::string, std::string> paper = {{"lenet5", "97% / 109%"},
                                                           {"alexnet", "37% / 214%"},
                                                           {"vgg16", "75% / 124%"},
                                                           {"resnet20", "60% / 61%"}};
  const auto it = paper.find(model);
  return it == paper.end() ? "not found" : it->second;
}

}  // namespace echelon::app::reproduce
