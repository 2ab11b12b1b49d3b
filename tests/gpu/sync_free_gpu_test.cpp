// The sync-free training step (parallel/deferred_stats.h): the single-device engine on a GPU with
// deferred step statistics does no host synchronisation between its reads (counted by the
// emulator), computes the same losses, accuracies and weights as the engine that reads every step,
// and still reports a bad label (naming the batch) and a non-finite loss (skipping the updates) at
// the read.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>
#if ECHELON_CUDA_SIM
#include <echelon/cuda/sim/sim.h>
#endif

#include "tests/support/flat_parameters.h"

namespace echelon {
namespace {

using parallel::BatchResult;
using parallel::PipelineEngine;
using parallel::PipelineOptions;
using parallel::StepStats;

// A batch as the loader hands it to a GPU run: pinned host memory, labels in [0, 10).
data::Batch pinned_batch(const Shape& image_shape, int64_t index, uint64_t seed) {
  Generator gen(seed);
  data::Batch batch;
  batch.images = Tensor::empty(image_shape, kFloat32, Device::cpu(), /*pinned=*/true);
  ops::copy_(batch.images, ops::rand(image_shape, gen));
  const int64_t n = image_shape[0];
  batch.labels = Tensor::empty({n}, kInt64, Device::cpu(), /*pinned=*/true);
  for (int64_t i = 0; i < n; ++i) batch.labels.data<int64_t>()[i] = (i * 7 + index * 3) % 10;
  batch.index = index;
  batch.fresh = n;
  return batch;
}

struct Run {
  std::shared_ptr<Sequential> model;
  std::unique_ptr<PipelineEngine> engine;
  std::vector<BatchResult> results;  // every batch's result, in the order the engine gave them
};

// The single-device engine on cuda:0; interval 0: the per-step synchronising path.
std::unique_ptr<Run> make_run(const std::string& model_name, int64_t channels, int64_t interval) {
  auto run = std::make_unique<Run>();
  run->model = make_model(model_name, channels, 10, /*seed=*/5);
  PipelineOptions options = PipelineOptions::single();
  options.on_result = [r = run.get()](const BatchResult& result) { r->results.push_back(result); };
  const SGDOptions sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
  run->engine = std::make_unique<PipelineEngine>(run->model, sgd, Device::cuda(0), options);
  if (interval > 0) run->engine->defer_step_stats(interval);
  return run;
}

uint64_t host_syncs() {
#if ECHELON_CUDA_SIM
  return cudasim::host_synchronizations();
#else
  return 0;  // counted only by the emulator
#endif
}

void check_same_training(const std::string& model_name, const Shape& image_shape, int64_t steps,
                         int64_t interval) {
  const int64_t channels = image_shape[1];
  auto per_step = make_run(model_name, channels, 0);
  auto deferred = make_run(model_name, channels, interval);
  std::vector<data::Batch> batches;
  for (int64_t i = 0; i < steps; ++i) batches.push_back(pinned_batch(image_shape, i, 100 + i));
  CHECK(per_step->engine->train_step(batches[0]).batches == 1);
  [[maybe_unused]] const uint64_t per_step_start = host_syncs();  // read in emulation only
  for (size_t i = 1; i < batches.size(); ++i)
    CHECK(per_step->engine->train_step(batches[i]).batches == 1);
#if ECHELON_CUDA_SIM
  // The path this replaces waits for the device several times in every step.
  const uint64_t per_step_syncs = (host_syncs() - per_step_start) / (batches.size() - 1);
  MESSAGE(model_name, ": host synchronisations per step, reading every step: ", per_step_syncs);
  CHECK(per_step_syncs >= 1);
#endif

  // The first step moves the model to the device (synchronising); count from the second.
  CHECK(deferred->engine->train_step(batches[0]).batches == 0);
  int64_t returned = 0;
  for (int64_t i = 1; i < steps; ++i) {
    const uint64_t before = host_syncs();
    const StepStats stats = deferred->engine->train_step(batches[static_cast<size_t>(i)]);
    returned += stats.batches;
    const bool read_point = (i + 1) % interval == 0;
    CHECK_MESSAGE(stats.batches == (read_point ? interval : 0), "step ", i);
    // Between read points a step waits for nothing; a read waits once.
    if (!read_point) CHECK_MESSAGE(host_syncs() == before, model_name, " step ", i);
#if ECHELON_CUDA_SIM
    if (read_point) CHECK_MESSAGE(host_syncs() == before + 1, model_name, " step ", i);
#endif
  }
  returned += deferred->engine->finish_epoch().batches;
  CHECK(returned == steps);

  REQUIRE(deferred->results.size() == per_step->results.size());
  for (size_t i = 0; i < per_step->results.size(); ++i) {
    const BatchResult& a = per_step->results[i];
    const BatchResult& b = deferred->results[i];
    CHECK(b.batch_index == a.batch_index);
    CHECK(b.finite);
    CHECK(b.loss == a.loss);  // same kernels in the same order on the same values
    CHECK(b.correct == a.correct);
  }
  CHECK(test::flat_parameters(*deferred->model) == test::flat_parameters(*per_step->model));
}

TEST_SUITE("sync_free_step_gpu") {
  TEST_CASE("LeNet-5: no host synchronisation between reads, the same losses and weights") {
    check_same_training("lenet5", {8, 1, 28, 28}, /*steps=*/7, /*interval=*/3);
  }

  TEST_CASE("ResNet-20: no host synchronisation in a step, the same losses and weights") {
    // 8x8 images (global average pooling takes any size): every block runs, at a sixteenth of
    // the emulation time of 32x32.
    check_same_training("resnet20", {2, 3, 8, 8}, /*steps=*/2, /*interval=*/2);
  }

  TEST_CASE("a bad label is raised at the read, naming the batch; its update is not applied") {
    auto run = make_run("lenet5", 1, /*interval=*/4);
    const Shape shape{4, 1, 28, 28};
    run->engine->train_step(pinned_batch(shape, 0, 1));
    const std::vector<float> after_first = test::flat_parameters(*run->model);
    data::Batch bad = pinned_batch(shape, 1, 2);
    bad.labels.data<int64_t>()[3] = 10;  // 10 classes
    const uint64_t before = host_syncs();
    CHECK(run->engine->train_step(bad).batches == 0);  // not raised at its step
    CHECK(run->engine->train_step(pinned_batch(shape, 2, 3)).batches == 0);
    CHECK(host_syncs() == before);
    try {
      run->engine->finish_epoch();
      FAIL("expected an echelon::Error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK_MESSAGE(what.find("training batch 1: label[3] = 10 is not a class index in [0, 10)") !=
                        std::string::npos,
                    what);
    }
    // Neither the bad batch's update nor the next one's landed.
    CHECK(test::flat_parameters(*run->model) == after_first);
  }

  TEST_CASE("a non-finite loss is reported at the read; from it on, no update is applied") {
    auto run = make_run("lenet5", 1, /*interval=*/8);
    const Shape shape{4, 1, 28, 28};
    run->engine->train_step(pinned_batch(shape, 0, 1));
    // A NaN in the last layer's bias makes every logit, and so the next losses, NaN.
    Tensor last_bias = run->model->parameters().back();
    const Tensor good_bias = last_bias.clone();
    ops::fill_(last_bias, NAN);
    const std::vector<float> poisoned = test::flat_parameters(*run->model);
    CHECK(run->engine->train_step(pinned_batch(shape, 1, 2)).batches == 0);
    CHECK(run->engine->train_step(pinned_batch(shape, 2, 3)).batches == 0);
    const StepStats stats = run->engine->finish_epoch();
    CHECK(stats.batches == 3);
    CHECK_FALSE(stats.finite);
    CHECK(stats.nonfinite_batch == 1);
    // Bitwise (NaN != NaN): neither NaN step's update landed.
    const std::vector<float> after = test::flat_parameters(*run->model);
    REQUIRE(after.size() == poisoned.size());
    CHECK(std::memcmp(after.data(), poisoned.data(), after.size() * sizeof(float)) == 0);
    // The read resets the guard: once the loss is finite again, updates apply again.
    ops::copy_(last_bias, good_bias);
    const std::vector<float> repaired = test::flat_parameters(*run->model);
    run->engine->train_step(pinned_batch(shape, 3, 4));
    CHECK(run->engine->finish_epoch().finite);
    CHECK(test::flat_parameters(*run->model) != repaired);
  }

  TEST_CASE("on the CPU, defer_step_stats changes nothing: every step returns its result") {
    auto model = make_model("lenet5", 1, 10, 5);
    parallel::PipelineEngine engine(model, SGDOptions{.lr = 0.05}, Device::cpu(),
                                    PipelineOptions::single());
    engine.defer_step_stats(4);
    for (int64_t i = 0; i < 2; ++i) {
      data::Batch b = pinned_batch({4, 1, 28, 28}, i, 7 + static_cast<uint64_t>(i));
      const StepStats stats = engine.train_step(b);
      CHECK(stats.batches == 1);
      CHECK(stats.samples == 4);
    }
  }
}

}  // namespace
}  // namespace echelon
