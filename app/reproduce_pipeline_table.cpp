// `echelon reproduce pipeline`: Zhang & Abdelrahman 2019's headline experiments at a CPU-sized
// scale, the paper's numbers beside ours and what differs (app/reproduce.h).
#include <chrono>
#include <string>
#include <vector>

#include <echelon/app/reproduce.h>
#include <echelon/app/reproduce_common.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

namespace echelon::app::reproduce {

namespace {

using parallel::ScheduleKind;

struct SpeedCase {
  std::string model;
  int64_t batch;
  int warmup, timed;
  std::string paper;
};

struct PipelinePlan {
  std::vector<SpeedCase> speed;
  std::vector<std::string> memory_models;
  int64_t memory_batch;
  std::vector<AccuracyModel> accuracy;
};

// `models` with the sizes of `size`: full = bench/RESULTS.md's second accuracy round.
PipelinePlan pipeline_plan(ReproduceSize size) {
  const std::string resnet_speed = "up to 1.8x (deeper ResNets on CIFAR-10, 2 GPUs)";
  PipelinePlan plan;
  std::vector<AccuracyModel> models = accuracy_models();
  for (AccuracyModel& m : models) {
    m.warmup_epochs = 1;  // the recipe that kept the stale partition stable (RESULTS.md)
    if (m.model == "resnet20") m.lr = 0.02;
  }
  switch (size) {
    case ReproduceSize::Full:
      plan.speed = {{"lenet5", 128, 5, 60, "not found"}, {"resnet20", 128, 2, 8, resnet_speed}};
      plan.memory_models = {"lenet5", "alexnet", "vgg16", "resnet20"};
      plan.memory_batch = 128;
      models[1].epochs = 5, models[3].epochs = 6;
      plan.accuracy = models;
      break;
    case ReproduceSize::Quick:
      plan.speed = {{"lenet5", 128, 2, 10, "not found"}, {"resnet20", 64, 1, 3, resnet_speed}};
      plan.memory_models = {"lenet5", "alexnet", "vgg16", "resnet20"};
      plan.memory_batch = 32;
      // LeNet-5 only: the other nets need CPU-minutes per run to leave chance level.
      models[0].train = 12000, models[0].test = 2000, models[0].epochs = 2;
      models[0].warmup_epochs = 0.5;
      models.resize(1);
      plan.accuracy = models;
      break;
    case ReproduceSize::Smoke:
      plan.speed = {{"lenet5", 32, 1, 2, "not found"}};
      plan.memory_models = {"lenet5"};
      plan.memory_batch = 8;
      models[0].train = 512, models[0].test = 128, models[0].epochs = 1, models[0].batch = 32;
      models[0].warmup_epochs = 0;
      plan.accuracy = {models[0]};
      break;
  }
  return plan;
}

json::Value speed_table(const PipelinePlan& plan, std::ostream& out) {
  out << "\n### 2-worker speedup: stale pipelining on 2 CPU threads vs ordinary training on 1\n\n"
      << "Random 1x28x28 batches, BLAS single-threaded, cut by --balance auto.\n\n"
      << "| model | batch | engine | cut (ppv) | images/s | speedup | CPU s / wall s "
         "| balance bound | paper |\n|---|---|---|---|---|---|---|---|---|\n";
  json::Value rows = json::Value::array();
  for (const SpeedCase& c : plan.speed) {
    const SpeedRow one =
        measure_speed(c.model, "1 worker", pipeline_options(ScheduleKind::Sequential, "", 1, false),
                      c.batch, c.warmup, c.timed);
    const SpeedRow two = measure_speed(c.model, "2 workers, stale",
                                       pipeline_options(ScheduleKind::Stale, "", 2, true), c.batch,
                                       c.warmup, c.timed);
    for (const SpeedRow* r : {&one, &two}) {
      const double speedup = r->images_per_s / one.images_per_s;
      const std::string paper = r == &one ? "-" : c.paper;
      out << "| " << c.model << " | " << c.batch << " | " << r->label << " | "
          << (r->ppv.empty() ? "-" : r->ppv) << " | " << fmt("%.1f", r->images_per_s) << " | "
          << fmt("%.2fx", speedup) << " | " << fmt("%.2f", r->cpu_per_wall) << " | "
          << (r->ppv.empty() ? "-" : fmt("%.2fx", r->balance_bound)) << " | " << paper << " |\n";
      json::Value row = json::Value::object();
      row.set("model", c.model);
      row.set("engine", r->label);
      row.set("ppv", r->ppv);
      row.set("images_per_s", r->images_per_s);
      row.set("speedup", speedup);
      row.set("cpu_per_wall", r->cpu_per_wall);
      row.set("paper", paper);
      rows.push(std::move(row));
    }
    out.flush();
  }
  return rows;
}

json::Value memory_table(const PipelinePlan& plan, std::ostream& out) {
  out << "\n### Activation memory: 4-stage pipelining vs non-pipelined, batch " << plan.memory_batch
      << "\n\n"
      << "Sum of each partition's peak held activations (+ weight snapshots for stash) over 5 "
         "random mini-batches.\n\n"
      << "| model | 4-stage cut (ppv) | non-pipelined MiB | stale MiB | stale increase "
         "| stash MiB | stash increase | paper Table 9 (stale / PipeDream) |\n"
      << "|---|---|---|---|---|---|---|---|\n";
  json::Value rows = json::Value::array();
  const auto mib = [](size_t b) { return fmt("%.1f", static_cast<double>(b) / 1048576.0); };
  for (const std::string& model : plan.memory_models) {
    const MemoryRow r = measure_memory(model, plan.memory_batch);
    const auto increase = [&](size_t b) {
      return 100.0 * (static_cast<double>(b) - static_cast<double>(r.base)) /
             static_cast<double>(r.base);
    };
    out << "| " << model << " | " << r.cuts << " | " << mib(r.base) << " | " << mib(r.stale)
        << " | " << fmt("%.0f%%", increase(r.stale)) << " | " << mib(r.stash) << " | "
        << fmt("%.0f%%", increase(r.stash)) << " | " << paper_memory_increase(model) << " |\n";
    out.flush();
    json::Value row = json::Value::object();
    row.set("model", model);
    row.set("ppv", r.cuts);
    row.set("base_bytes", static_cast<int64_t>(r.base));
    row.set("stale_bytes", static_cast<int64_t>(r.stale));
    row.set("stash_bytes", static_cast<int64_t>(r.stash));
    row.set("stale_increase_pct", increase(r.stale));
    row.set("stash_increase_pct", increase(r.stash));
    row.set("paper", paper_memory_increase(model));
    rows.push(std::move(row));
  }
  return rows;
}

std::string paper_deep_drop(const std::string& model) {
  if (model == "vgg16_bn") return "up to 12";
  if (model == "resnet20") return "up to 8.5";
  return "not found";
}

json::Value accuracy_table(const PipelinePlan& plan, const std::string& data_dir,
                           std::ostream& out) {
  out << "\n### Test accuracy drop of stale pipelining vs non-pipelined, 2 partitions\n\n"
      << "SGD momentum 0.9, weight decay 5e-4, linear warm-up then cosine decay; hybrid = stale "
         "for the first half of the epochs, then sequential; seed 0.\n\n"
      << "| model | train / test | epochs | warm-up | schedule | cut (ppv) | partition 0 | test "
         "acc "
         "| drop (points) | paper drop |\n|---|---|---|---|---|---|---|---|---|---|\n";
  json::Value rows = json::Value::array();
  const std::string dir = data_dir.empty() ? data::kDefaultFashionMnistDir : data_dir;
  for (const AccuracyModel& m : plan.accuracy) {
    const Split train = load_split(dir, "train", m.train);
    const Split test = load_split(dir, "test", m.test);
    const auto shape = make_model(m.model, 1, 10, 1, 28);
    const std::string shallow = std::to_string(m.shallow(*shape));
    const std::string deep = std::to_string(cut_before_classifier(*shape));
    struct Run {
      std::string label, ppv, paper;
      ScheduleKind kind;
    };
    const std::vector<Run> runs = {
        {"sequential (non-pipelined)", "", "-", ScheduleKind::Sequential},
        {"stale, paper's placement (ppv " + m.paper_ppv + ")", shallow, fmt("%g", m.paper_drop),
         ScheduleKind::Stale},
        {"stale, deep (all but the classifier)", deep, paper_deep_drop(m.model),
         ScheduleKind::Stale},
        {"hybrid (stale, then sequential)", shallow, "not found", ScheduleKind::Hybrid}};
    double sequential = 0;
    for (const Run& run : runs) {
      parallel::PipelineOptions options = pipeline_options(run.kind, run.ppv, 1, false);
      options.hybrid_switch = 0.5;
      const AccuracyResult result = train_and_test(m, options, train, test, 0);
      if (run.kind == ScheduleKind::Sequential) sequential = result.test_acc;
      const double drop = 100 * (sequential - result.test_acc);
      const int64_t cut =
          run.ppv.empty() ? static_cast<int64_t>(shape->size()) : std::stoll(run.ppv);
      out << "| " << m.model << " | " << train.size() << " / " << test.size() << " | " << m.epochs
          << " | " << fmt("%g", m.warmup_epochs) << " | " << run.label << " | "
          << (run.ppv.empty() ? "-" : run.ppv) << " | "
          << (run.ppv.empty() ? "whole model" : layer_names(*shape, 0, cut)) << " | "
          << fmt("%.2f", 100 * result.test_acc) << " | "
          << (run.ppv.empty() ? "-" : fmt("%+.2f", drop)) << " | " << run.paper << " |\n";
      out.flush();
      json::Value row = json::Value::object();
      row.set("model", m.model);
      row.set("schedule", run.label);
      row.set("ppv", run.ppv);
      row.set("train_examples", train.size());
      row.set("epochs", m.epochs);
      row.set("test_acc", result.test_acc);
      row.set("drop_points", run.ppv.empty() ? 0.0 : drop);
      row.set("paper_drop", run.paper);
      rows.push(std::move(row));
    }
  }
  return rows;
}

}  // namespace

json::Value reproduce_pipeline(const ReproduceOptions& options, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  ops::set_cpu_threads(1);  // each partition is one thread: the CPU stand-in for one GPU
  const PipelinePlan plan = pipeline_plan(options.size);
  const std::vector<std::string> differences = {
      std::string("data set: Fashion-MNIST 1x28x28 for every net (paper: MNIST for LeNet-5, ") +
          "CIFAR-10 for AlexNet, VGG-16 and ResNet-20)",
      std::string("models: adapted to 1x28x28 inputs; VGG-16 with batch norm in the accuracy ") +
          "runs (plain VGG-16 does not move in a few dozen steps from scratch)",
      "hardware: one CPU thread per partition (paper: one GPU per partition)",
      std::string("memory: held activation bytes only (paper Table 9: whole-process memory ") +
          "with weights and workspace)",
      options.size == ReproduceSize::Full
          ? "schedule: subsets and a few epochs for AlexNet, VGG-16 and ResNet-20 (paper: full "
            "training)"
          : "schedule: shortened (--quick or smoke size): accuracy for LeNet-5 only, on a "
            "subset for 1-2 epochs, far from converged (paper: full training of all four nets; "
            "run without --quick for AlexNet, VGG-16 and ResNet-20)"};
  out << "## Pipelining: Zhang & Abdelrahman 2019, \"Pipelined Training with Stale Weights of "
         "Deep Convolutional Neural Networks\" ("
      << size_name(options.size) << ")\n\nWhat differs from the paper:\n";
  for (const std::string& d : differences) out << "- " << d << "\n";
  json::Value result = json::Value::object();
  result.set("paper", "pipeline");
  result.set("size", size_name(options.size));
  json::Value diffs = json::Value::array();
  for (const std::string& d : differences) diffs.push(d);
  result.set("differences", std::move(diffs));
  result.set("speed", speed_table(plan, out));
  result.set("memory", memory_table(plan, out));
  result.set("accuracy", accuracy_table(plan, options.data_dir, out));
  finish_reproduce(result, start, options, out);
  return result;
}

}  // namespace echelon::app::reproduce
