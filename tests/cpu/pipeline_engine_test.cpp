// The pipeline engine on real (small) models: equivalence with ordinary training, the inline
// single-device case, measured staleness against docs/pipeline.md, memory of stashing, and
// shutdown on errors. Most tests run executor threads, so the suite is a concurrency suite (run it
// under ThreadSanitizer).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <thread>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/layers/conv2d.h>
#include <echelon/layers/flatten.h>
#include <echelon/layers/linear.h>
#include <echelon/layers/optim.h>
#include <echelon/layers/relu.h>
#include <echelon/layers/sequential.h>
#include <echelon/layers/tanh.h>
#include <echelon/parallel/engine.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {

// (N, 2, 5, 5) -> 5 classes; 6 layers so that up to 6 partitions are possible.
std::shared_ptr<Sequential> small_model(uint64_t seed) {
  Generator gen(seed);
  Conv2dOptions conv;
  conv.padding = 1;
  return std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
      std::make_shared<Conv2d>(2, 3, 3, conv, gen), std::make_shared<ReLU>(),
      std::make_shared<Flatten>(), std::make_shared<Linear>(75, 7, gen), std::make_shared<Tanh>(),
      std::make_shared<Linear>(7, 5, gen)});
}

std::vector<data::Batch> random_batches(int count, int64_t size, uint64_t seed) {
  Generator gen(seed);
  std::vector<data::Batch> batches;
  for (int i = 0; i < count; ++i) {
    data::Batch batch;
    batch.images = ops::randn({size, 2, 5, 5}, gen);
    const Tensor u = ops::rand({size}, gen);
    std::vector<int64_t> labels;
    for (float v : u.to_vector<float>()) labels.push_back(static_cast<int64_t>(v * 5));
    batch.labels = Tensor::from_vector<int64_t>(labels, {size});
    batch.index = i;
    batch.fresh = size;
    batches.push_back(batch);
  }
  return batches;
}

SGDOptions sgd_config() {
  SGDOptions sgd;
  sgd.lr = 0.05;
  sgd.momentum = 0.9;
  return sgd;
}

// Ordinary training: forward, loss, backward, SGD step. Returns the per-batch losses; `state`
// (when given) receives the optimizer's state.
std::vector<double> train_reference(Sequential& model, const std::vector<data::Batch>& batches,
                                    const SGDOptions& options = sgd_config(),
                                    StateDict* state = nullptr) {
  SGD sgd(model.named_parameters(), options);
  std::vector<double> losses;
  for (const data::Batch& batch : batches) {
    Tensor loss = cross_entropy(model.forward(batch.images), batch.labels);
    losses.push_back(loss.item<float>());
    backward(loss);
    sgd.step();
    sgd.zero_grad();
  }
  if (state) *state = sgd.state_dict();
  return losses;
}

// Reference for `stale` on 2 partitions cut at layer 3, in one thread: partition 1 (layers 3..5)
// updates at once; partition 0 (layers 0..2) computes its gradient from this batch's forward but
// applies it one batch later, so forward t runs on partition-0 weights updated through batch t-2
// (docs/pipeline.md). With `predict`, that forward runs on w - lr * momentum instead (partition
// 0's first layer is a convolution, whose weight gradient does not read its weights).
void train_delayed_reference(Sequential& model, const std::vector<data::Batch>& batches,
                             bool predict) {
  const double lr = sgd_config().lr;
  const NamedTensors all = model.named_parameters();
  const NamedTensors p0(all.begin(), all.begin() + 2), p1(all.begin() + 2, all.end());
  SGD sgd0(p0, sgd_config()), sgd1(p1, sgd_config());
  std::vector<Tensor> pending;
  const auto apply_pending = [&] {
    for (size_t i = 0; i < p0.size(); ++i) Tensor(p0[i].second).set_grad(pending[i]);
    sgd0.step();
    sgd0.zero_grad();
  };
  for (const data::Batch& batch : batches) {
    std::vector<Tensor> saved;
    if (predict && sgd0.momentum_buffers()[0].defined()) {
      NoGradGuard no_grad;
      for (size_t i = 0; i < p0.size(); ++i) {
        saved.push_back(p0[i].second.clone());
        Tensor target = p0[i].second.detach();
        ops::copy_(target, ops::add(saved[i], ops::mul(sgd0.momentum_buffers()[i], -lr)));
      }
    }
    Tensor logits = model.forward(batch.images);
    for (size_t i = 0; i < saved.size(); ++i) {
      NoGradGuard no_grad;
      Tensor target = p0[i].second.detach();
      ops::copy_(target, saved[i]);
    }
    backward(cross_entropy(logits, batch.labels));
    sgd1.step();
    sgd1.zero_grad();
    std::vector<Tensor> now;
    for (const auto& [name, param] : p0) now.push_back(param.grad().clone());
    sgd0.zero_grad();
    if (!pending.empty()) apply_pending();
    pending = now;
  }
  apply_pending();
}

struct PipelineRun {
  std::unique_ptr<PipelineEngine> engine;
  StepStats stats;
};

PipelineRun train_pipeline(std::shared_ptr<Sequential> model, PipelineOptions options,
                           const std::vector<data::Batch>& batches) {
  PipelineRun run;
  run.engine = std::make_unique<PipelineEngine>(model, sgd_config(), Device::cpu(), options);
  for (const data::Batch& batch : batches) run.stats.add(run.engine->train_step(batch));
  run.stats.add(run.engine->finish_epoch());
  return run;
}

void check_same_parameters(Sequential& a, Sequential& b, double tolerance) {
  const NamedTensors pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::vector<float> va = pa[i].second.to_vector<float>();
    const std::vector<float> vb = pb[i].second.to_vector<float>();
    REQUIRE(va.size() == vb.size());
    for (size_t j = 0; j < va.size(); ++j) {
      if (tolerance == 0) {
        REQUIRE_MESSAGE(va[j] == vb[j], pa[i].first, "[", j, "]");
      } else {
        REQUIRE_MESSAGE(std::abs(va[j] - vb[j]) <= tolerance * (1 + std::abs(vb[j])), pa[i].first,
                        "[", j, "]");
      }
    }
  }
}

PipelineOptions options_for(ScheduleKind kind, const std::string& ppv, int micro = 1) {
  PipelineOptions options;
  options.schedule = kind;
  options.ppv = ppv;
  options.partitions = 1;
  options.micro_batches = micro;
  options.hybrid_switch = 1;
  return options;
}

// Throws from its forward on the `fail_at`-th call: an error inside a partition.
class FailingLayer : public Module {
 public:
  explicit FailingLayer(int fail_at) : fail_at_(fail_at) {}
  Tensor forward(const Tensor& x) override {
    ECH_CHECK(++calls_ < fail_at_, "FailingLayer: injected failure at call ", calls_);
    return x;
  }
  std::string name() const override { return "FailingLayer"; }

 private:
  int fail_at_, calls_ = 0;
};

// The identity, noting the thread its forward runs on.
class ThreadProbe : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    seen_ = std::this_thread::get_id();
    return x;
  }
  std::string name() const override { return "ThreadProbe"; }
  std::thread::id seen() const { return seen_; }

 private:
  std::thread::id seen_;
};

// The identity that sleeps in its forward: wall time in the partition without CPU time, as when
// the partition's thread is preempted.
class SleepingLayer : public Module {
 public:
  Tensor forward(const Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return x;
  }
  std::string name() const override { return "SleepingLayer"; }
};

// small_model(seed) with a ThreadProbe after its last layer (the same computation).
std::shared_ptr<Sequential> probed_model(uint64_t seed, std::shared_ptr<ThreadProbe> probe) {
  std::vector<std::shared_ptr<Module>> layers = small_model(seed)->layers();
  layers.push_back(std::move(probe));
  return std::make_shared<Sequential>(layers);
}

}  // namespace

TEST_SUITE("concurrency_pipeline") {
  TEST_CASE("single-device training is one partition inline: caller's thread, bit-identical") {
    const auto batches = random_batches(5, 9, 31);
    auto reference = small_model(4);
    const std::vector<double> losses = train_reference(*reference, batches);
    auto probe = std::make_shared<ThreadProbe>();
    auto model = probed_model(4, probe);
    auto engine = make_single_device_engine(model, sgd_config(), Device::cpu());
    CHECK(engine->name() == "single");
    for (size_t i = 0; i < batches.size(); ++i) {
      const StepStats stats = engine->train_step(batches[i]);
      // Completed within the call, on this thread, like ordinary training.
      CHECK(stats.batches == 1);
      CHECK(stats.loss_sum == losses[i] * 9);
      CHECK(probe->seen() == std::this_thread::get_id());
    }
    CHECK(engine->finish_epoch().batches == 0);
    CHECK(engine->report().is_null());  // summary.json gets no pipeline block
    check_same_parameters(*model, *reference, 0);
  }

  TEST_CASE("a pipeline runs one partition inline and several on executor threads") {
    const auto batches = random_batches(2, 4, 32);
    for (const std::string ppv : {"", "3"}) {
      CAPTURE(ppv);
      auto probe = std::make_shared<ThreadProbe>();
      PipelineEngine engine(probed_model(5, probe), sgd_config(), Device::cpu(),
                            options_for(ScheduleKind::Stale, ppv));
      CHECK(engine.name() == "pipeline:stale");
      for (const auto& b : batches) engine.train_step(b);
      engine.finish_epoch();
      CHECK((probe->seen() == std::this_thread::get_id()) == ppv.empty());
      CHECK(engine.report().at("partitions").as_int() == (ppv.empty() ? 1 : 2));
    }
  }

  TEST_CASE(
      "an error in the inline partition reaches the caller as thrown; the engine stays shut") {
    std::vector<std::shared_ptr<Module>> layers = small_model(6)->layers();
    layers.insert(layers.begin() + 2, std::make_shared<FailingLayer>(2));
    auto engine = make_single_device_engine(std::make_shared<Sequential>(layers), sgd_config(),
                                            Device::cpu());
    const auto batches = random_batches(3, 4, 33);
    CHECK(engine->train_step(batches[0]).batches == 1);
    std::string thrown;
    try {
      engine->train_step(batches[1]);
    } catch (const Error& e) {
      thrown = e.what();
    }
    CHECK(thrown.find("injected failure at call 2") != std::string::npos);
    CHECK(thrown.find("partition") == std::string::npos);  // as the layer threw it, not wrapped
    CHECK_THROWS_WITH_AS(engine->train_step(batches[2]),
                         doctest::Contains("pipeline (single): partition 0 (layers [0, 7) on cpu)"),
                         Error);
  }

  TEST_CASE("one partition: every schedule is bit-identical to ordinary training") {
    const auto batches = random_batches(5, 9, 11);
    auto reference = small_model(3);
    const std::vector<double> losses = train_reference(*reference, batches);
    double loss_sum = 0;
    for (size_t i = 0; i < losses.size(); ++i) loss_sum += losses[i] * 9;
    for (auto kind : {ScheduleKind::Sequential, ScheduleKind::Stale, ScheduleKind::Stash,
                      ScheduleKind::GPipe, ScheduleKind::Hybrid}) {
      CAPTURE(std::string(schedule_name(kind)));
      PipelineOptions options = options_for(kind, "");
      auto model = small_model(3);
      PipelineRun run = train_pipeline(model, options, batches);
      CHECK(run.stats.batches == 5);
      CHECK(run.stats.samples == 45);
      CHECK(run.stats.loss_sum == doctest::Approx(loss_sum).epsilon(1e-6));
      check_same_parameters(*model, *reference, 0);
    }
  }

  TEST_CASE("sequential schedule over 3 partitions is bit-identical to ordinary training") {
    const auto batches = random_batches(4, 7, 12);
    auto reference = small_model(5);
    train_reference(*reference, batches);
    auto model = small_model(5);
    PipelineRun run = train_pipeline(model, options_for(ScheduleKind::Sequential, "2,4"), batches);
    CHECK(run.engine->cuts() == std::vector<int64_t>{2, 4});
    check_same_parameters(*model, *reference, 0);
    for (const PartitionStats& s : run.engine->partition_stats()) CHECK(s.max_staleness() == 0);
  }

  TEST_CASE("--ema over 3 partitions: each partition averages its weights, routed back on load") {
    SGDOptions sgd = sgd_config();
    sgd.ema_decay = 0.8;
    const auto batches = random_batches(4, 7, 13);
    auto reference = small_model(6);
    StateDict expected;
    train_reference(*reference, batches, sgd, &expected);
    const auto sequential = options_for(ScheduleKind::Sequential, "2,4");
    auto model = small_model(6);
    PipelineEngine engine(model, sgd, Device::cpu(), sequential);
    for (const data::Batch& batch : batches) engine.train_step(batch);
    engine.finish_epoch();
    const StateDict merged = engine.optimizer_state();
    const auto max_difference = [](const Tensor& a, const Tensor& b) {
      return ops::amax(ops::abs(ops::sub(a, b))).item<float>();
    };
    size_t averages = 0;
    for (const auto& entry : model->named_parameters()) {
      const std::string& name = entry.first;  // a structured binding: no lambda capture (CAPTURE)
      const Tensor& param = entry.second;
      CAPTURE(name);
      REQUIRE(merged.contains("ema." + name));
      CHECK(max_difference(merged.at("ema." + name), expected.at("ema." + name)) == 0.0f);
      CHECK(max_difference(merged.at("ema." + name), param) > 0.0f);  // an average, not a copy
      ++averages;
    }
    CHECK(averages == model->named_parameters().size());

    // A fresh engine over the same weights and state continues with the same averages.
    auto copy = small_model(0);
    copy->load_state_dict(model->state_dict());
    PipelineEngine again(copy, sgd, Device::cpu(), sequential);
    again.load_optimizer_state(merged);  // handles to engine's buffers: `again` steps first
    again.train_step(batches[0]);
    again.finish_epoch();
    engine.train_step(batches[0]);
    engine.finish_epoch();
    const StateDict after = engine.optimizer_state(), after_again = again.optimizer_state();
    for (const auto& [name, param] : model->named_parameters())
      CHECK(max_difference(after.at("ema." + name), after_again.at("ema." + name)) == 0.0f);
  }

  TEST_CASE("gpipe: micro-batch gradients equal the full-batch gradient") {
    const auto batches = random_batches(3, 11, 13);
    auto reference = small_model(6);
    train_reference(*reference, batches);
    auto model = small_model(6);
    PipelineRun run = train_pipeline(model, options_for(ScheduleKind::GPipe, "3", 3), batches);
    CHECK(run.stats.batches == 3);
    CHECK(run.stats.samples == 33);
    check_same_parameters(*model, *reference, 2e-5);
    for (const PartitionStats& s : run.engine->partition_stats()) {
      CHECK(s.updates == 3);    // one synchronous update per mini-batch
      CHECK(s.backwards == 9);  // three micro-batches each
      CHECK(s.max_staleness() == 0);
    }
  }

  TEST_CASE("measured staleness equals the analytic value per partition") {
    const int64_t n = 12;
    const auto batches = random_batches(static_cast<int>(n), 5, 14);
    for (auto kind : {ScheduleKind::Stale, ScheduleKind::Stash, ScheduleKind::GPipe}) {
      CAPTURE(std::string(schedule_name(kind)));
      PipelineRun run = train_pipeline(small_model(7), options_for(kind, "2,3,5", 2), batches);
      const auto stats = run.engine->partition_stats();
      REQUIRE(stats.size() == 4);
      for (int k = 0; k < 4; ++k) {
        CAPTURE(k);
        const int64_t expected = analytic_staleness(kind, 4, k);
        CHECK(stats[k].max_staleness() == expected);
        if (kind == ScheduleKind::Stale) {
          // The first K-1-k mini-batches start before any update (warm-up), the rest are steady.
          CHECK(stats[k].staleness.at(expected) == n - expected);
          CHECK(expected == 3 - k);
        }
      }
      const json::Value report = run.engine->report();
      CHECK(report.at("stages").as_array()[0].at("staleness_max").as_int() ==
            analytic_staleness(kind, 4, 0));
    }
  }

  TEST_CASE("stale on 2 partitions is SGD with partition 0's gradients one step late") {
    const auto batches = random_batches(10, 6, 21);
    for (bool predict : {false, true}) {
      CAPTURE(predict);
      auto reference = small_model(11);
      train_delayed_reference(*reference, batches, predict);
      auto model = small_model(11);
      PipelineOptions options = options_for(ScheduleKind::Stale, "3");
      options.predict_weights = predict;
      PipelineRun run = train_pipeline(model, options, batches);
      check_same_parameters(*model, *reference, 1e-5);
    }
  }

  TEST_CASE("stale, no stash: partition 0's backward reads the weights current at that time") {
    // Cut 5: partition 0 = conv, relu, flatten, linear, tanh, so its backward propagates through
    // a linear layer's weights. One-thread reference of partition 0's program F(t), B(t-1),
    // update: B(t-1) runs on the graph of F(t-1) but reads the weights F(t) used.
    const auto batches = random_batches(10, 6, 23);
    auto reference = small_model(13);
    const NamedTensors all = reference->named_parameters();
    const NamedTensors p0(all.begin(), all.begin() + 4), p1(all.begin() + 4, all.end());
    SGD sgd0(p0, sgd_config()), sgd1(p1, sgd_config());
    const auto& layers = reference->layers();
    Tensor previous_root, previous_grad;  // partition 0's output of F(t-1) and its gradient
    const auto backward_previous = [&] {
      backward(previous_root, previous_grad);
      sgd0.step();
      sgd0.zero_grad();
    };
    for (const data::Batch& batch : batches) {
      Tensor out0 = batch.images;
      for (size_t i = 0; i < 5; ++i) out0 = layers[i]->forward(out0);
      if (previous_root.defined()) backward_previous();
      Tensor in1 = out0.detach().set_requires_grad(true);
      backward(cross_entropy(layers[5]->forward(in1), batch.labels));
      sgd1.step();
      sgd1.zero_grad();
      previous_root = out0;
      previous_grad = in1.grad();
    }
    backward_previous();

    auto model = small_model(13);
    PipelineRun run = train_pipeline(model, options_for(ScheduleKind::Stale, "5"), batches);
    check_same_parameters(*model, *reference, 1e-5);
  }

  TEST_CASE("weight prediction changes the stale run, and never touches sequential or stash") {
    const auto batches = random_batches(8, 6, 22);
    const auto run_with = [&](ScheduleKind kind, bool predict) {
      auto model = small_model(12);
      PipelineOptions options = options_for(kind, "3");
      options.predict_weights = predict;
      train_pipeline(model, options, batches);
      return model;
    };
    for (auto kind : {ScheduleKind::Sequential, ScheduleKind::Stash}) {
      CAPTURE(std::string(schedule_name(kind)));
      check_same_parameters(*run_with(kind, true), *run_with(kind, false), 0);
    }
    const auto plain = run_with(ScheduleKind::Stale, false);
    const auto predicted = run_with(ScheduleKind::Stale, true);
    CHECK(plain->named_parameters()[0].second.to_vector<float>() !=
          predicted->named_parameters()[0].second.to_vector<float>());
  }

  TEST_CASE("stashing holds more memory than stale weights, and both more than sequential") {
    const auto batches = random_batches(8, 9, 15);
    size_t peak[3] = {0, 0, 0};
    int i = 0;
    for (auto kind : {ScheduleKind::Sequential, ScheduleKind::Stale, ScheduleKind::Stash}) {
      PipelineRun run = train_pipeline(small_model(8), options_for(kind, "1,3"), batches);
      for (const PartitionStats& s : run.engine->partition_stats()) {
        peak[i] += s.peak_bytes;
        CHECK(s.held_bytes == 0);  // everything released after the flush
      }
      ++i;
    }
    CHECK(peak[0] < peak[1]);
    CHECK(peak[1] < peak[2]);
  }

  TEST_CASE("hybrid runs stale, then sequential after the switch epoch") {
    const auto batches = random_batches(6, 5, 16);
    PipelineOptions options = options_for(ScheduleKind::Hybrid, "3");
    PipelineEngine engine(small_model(9), sgd_config(), Device::cpu(), options);
    for (const auto& b : batches) engine.train_step(b);
    engine.finish_epoch();
    CHECK(engine.current_schedule() == ScheduleKind::Sequential);
    CHECK(engine.partition_stats()[0].max_staleness() == 1);
    const int64_t stale_before = engine.partition_stats()[0].staleness.at(1);
    for (const auto& b : batches) engine.train_step(b);
    engine.finish_epoch();
    // No new stale backward in the sequential epoch.
    CHECK(engine.partition_stats()[0].staleness.at(1) == stale_before);
    CHECK(engine.partition_stats()[0].backwards == 12);
  }

  TEST_CASE("predict equals the whole model's forward; trace file parses") {
    const auto batches = random_batches(3, 6, 17);
    PipelineOptions options = options_for(ScheduleKind::Stale, "2");
    const std::string path = "pipeline_test_trace.json";
    options.trace_path = path;
    auto model = small_model(10);
    PipelineRun run = train_pipeline(model, options, batches);
    const Tensor logits = run.engine->predict(batches[0].images);
    model->eval();
    const Tensor expected = model->forward(batches[0].images);
    model->train();
    CHECK(logits.to_vector<float>() == expected.to_vector<float>());
    const json::Value trace = json::parse_file(path);
    CHECK(trace.at("traceEvents").size() > 12);
    std::remove(path.c_str());
  }

  TEST_CASE("busy CPU seconds: within busy seconds, which alone count time off the core") {
    auto model = small_model(12);
    std::vector<std::shared_ptr<Module>> layers = model->layers();
    layers.insert(layers.begin() + 5, std::make_shared<SleepingLayer>());  // in partition 1
    const auto batches = random_batches(4, 5, 19);
    PipelineRun run = train_pipeline(std::make_shared<Sequential>(layers),
                                     options_for(ScheduleKind::Stale, "3"), batches);
    const auto stats = run.engine->partition_stats();
    REQUIRE(stats.size() == 2);
    for (const PartitionStats& s : stats) {
      CHECK(s.busy_cpu_s > 0);
      CHECK(s.busy_cpu_s <= s.busy_s + 1e-4);
    }
    // Four forwards asleep for 20 ms each: busy, not CPU.
    CHECK(stats[1].busy_s - stats[1].busy_cpu_s >= 4 * 0.02 * 0.9);
    CHECK(stats[1].busy_cpu_s < stats[1].busy_s - 0.05);
    const json::Value report = run.engine->report();
    CHECK(report.at("stages").as_array()[1].at("busy_cpu_s").as_double() == stats[1].busy_cpu_s);
  }

  TEST_CASE("an error in any partition shuts the pipeline down within bounded time") {
    for (int failing_partition = 0; failing_partition < 3; ++failing_partition) {
      CAPTURE(failing_partition);
      auto model = small_model(11);
      std::vector<std::shared_ptr<Module>> layers = model->layers();
      layers.insert(layers.begin() + 2 * failing_partition + 1, std::make_shared<FailingLayer>(4));
      auto faulty = std::make_shared<Sequential>(layers);
      const auto batches = random_batches(10, 5, 18);
      auto outcome = std::async(std::launch::async, [&] {
        PipelineEngine engine(faulty, sgd_config(), Device::cpu(),
                              options_for(ScheduleKind::Stale, "2,5"));
        for (const auto& b : batches) engine.train_step(b);
        engine.finish_epoch();
      });
      REQUIRE(outcome.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
      CHECK_THROWS_WITH_AS(outcome.get(), doctest::Contains("injected failure"), Error);
    }
  }

  TEST_CASE("bad options are rejected naming the option, never a command-line flag") {
    PipelineOptions options;
    options.micro_batches = 0;
    CHECK_THROWS_WITH_AS(options.validate(),
                         doctest::Contains("pipeline: micro_batches must be >= 1"), Error);
    options = PipelineOptions();
    options.ppv = "3,1";
    CHECK_THROWS_WITH_AS(options.validate(), doctest::Contains("partition points '3,1'"), Error);
    options = PipelineOptions();
    options.schedule = ScheduleKind::Hybrid;
    options.hybrid_switch = 0.5;
    CHECK_THROWS_WITH_AS(options.validate(), doctest::Contains("pipeline: hybrid_switch"), Error);
    options.total_epochs = 10;
    CHECK(options.hybrid_switch_epoch() == 5);
    // Cuts and partition counts that do not fit the model fail when the engine is built (before a
    // trainer touches its run folder), not at the first batch.
    CHECK_THROWS_WITH_AS(PipelineEngine(small_model(1), sgd_config(), Device::cpu(),
                                        options_for(ScheduleKind::Stale, "7")),
                         doctest::Contains("6 layers"), Error);
    PipelineOptions too_many = options_for(ScheduleKind::Stale, "");
    too_many.partitions = 7;
    CHECK_THROWS_WITH_AS(PipelineEngine(small_model(1), sgd_config(), Device::cpu(), too_many),
                         doctest::Contains("cannot cut 6 layers into 7 partitions"), Error);
  }
}
