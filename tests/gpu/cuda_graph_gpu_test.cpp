// The captured training step (PipelineOptions::cuda_graph, parallel/cuda_graph.h): the
// single-device engine that captures its step once and replays it trains bit for bit like the
// eager engine, through a learning-rate change (the rate reaches the graph through device memory)
// and a last partial batch (run eagerly), and refuses to run where capture cannot work.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/layers/dropout.h>
#include <echelon/layers/flatten.h>
#include <echelon/layers/linear.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/pipeline.h>
#include <echelon/tensor/ops.h>

#include "tests/support/flat_parameters.h"

namespace echelon {
namespace {

using parallel::BatchResult;
using parallel::PipelineEngine;
using parallel::PipelineOptions;

data::Batch graph_batch(const Shape& image_shape, int64_t index) {
  Generator gen(300 + static_cast<uint64_t>(index));
  data::Batch batch;
  batch.images = Tensor::empty(image_shape, kFloat32, Device::cpu(), /*pinned=*/true);
  ops::copy_(batch.images, ops::rand(image_shape, gen));
  const int64_t n = image_shape[0];
  batch.labels = Tensor::empty({n}, kInt64, Device::cpu(), /*pinned=*/true);
  for (int64_t i = 0; i < n; ++i) batch.labels.data<int64_t>()[i] = (i * 3 + index * 5) % 10;
  batch.index = index;
  batch.fresh = n;
  return batch;
}

struct GraphRun {
  std::shared_ptr<Sequential> model;
  std::unique_ptr<PipelineEngine> engine;
  std::vector<BatchResult> results;
};

std::unique_ptr<GraphRun> make_graph_run(bool cuda_graph, Device device = Device::cuda(0),
                                         std::shared_ptr<Sequential> model = nullptr) {
  auto run = std::make_unique<GraphRun>();
  run->model = model ? std::move(model) : make_model("lenet5", 1, 10, /*seed=*/9);
  PipelineOptions options = PipelineOptions::single();
  options.cuda_graph = cuda_graph;
  options.on_result = [r = run.get()](const BatchResult& result) { r->results.push_back(result); };
  // With a moving average (--ema): the captured SGD kernels update it too.
  const SGDOptions sgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4, .ema_decay = 0.9};
  run->engine = std::make_unique<PipelineEngine>(run->model, sgd, device, options);
  run->engine->defer_step_stats(3);
  return run;
}

}  // namespace

TEST_SUITE("cuda_graph_step_gpu") {
  TEST_CASE("LeNet-5: captured and replayed steps give the eager engine's losses and weights") {
    // 16 images: pinned blocks of 50 KB, outside the size class runtime_gpu_test reuses.
    const Shape full{16, 1, 28, 28}, partial{5, 1, 28, 28};
    const int64_t steps = 8;  // 2 warm-up, 1 capture + replay, 5 replays, then a partial batch
    auto eager = make_graph_run(false);
    auto graph = make_graph_run(true);
    for (GraphRun* run : {eager.get(), graph.get()}) {
      for (int64_t i = 0; i < steps; ++i) {
        if (i == 5) run->engine->set_lr(0.02);  // after the capture: must reach the replays
        run->engine->train_step(graph_batch(full, i));
      }
      run->engine->train_step(graph_batch(partial, steps));
      run->engine->finish_epoch();
    }
    CHECK(graph->engine->graph_replays() == steps - 2);
    CHECK(eager->engine->graph_replays() == 0);
    REQUIRE(graph->results.size() == static_cast<size_t>(steps + 1));
    REQUIRE(eager->results.size() == graph->results.size());
    for (size_t i = 0; i < eager->results.size(); ++i) {
      CAPTURE(i);
      CHECK(graph->results[i].batch_index == eager->results[i].batch_index);
      CHECK(graph->results[i].samples == eager->results[i].samples);
      CHECK(graph->results[i].loss == eager->results[i].loss);  // bit for bit
      CHECK(graph->results[i].correct == eager->results[i].correct);
    }
    CHECK(eager->results.front().loss != eager->results[steps - 1].loss);
    CHECK(test::flat_parameters(*graph->model) == test::flat_parameters(*eager->model));
    // Replays count as optimizer steps (checkpoints record them).
    const StateDict graph_state = graph->engine->optimizer_state();
    const StateDict eager_state = eager->engine->optimizer_state();
    CHECK(graph_state.find("step")->item<int64_t>() == steps + 1);
    // Every replay updated the moving averages as an eager step does, bit for bit.
    for (const auto& entry : eager->model->named_parameters()) {
      const std::string& name = entry.first;  // a structured binding: no lambda capture (CAPTURE)
      const Tensor& param = entry.second;
      CAPTURE(name);
      REQUIRE(graph_state.contains("ema." + name));
      const std::vector<float> average = graph_state.at("ema." + name).cpu().to_vector<float>();
      CHECK(average == eager_state.at("ema." + name).cpu().to_vector<float>());
      CHECK(average != param.cpu().to_vector<float>());
    }
    // Evaluation after the graph ran sees the final weights.
    const Tensor images = graph_batch(full, 99).images;
    CHECK(graph->engine->predict(images).cpu().to_vector<float>() ==
          eager->engine->predict(images).cpu().to_vector<float>());
  }

  TEST_CASE("a capture needs the sync-free single-device step on a GPU") {
    auto cpu = make_graph_run(true, Device::cpu());
    CHECK_THROWS_WITH_AS(cpu->engine->train_step(graph_batch({4, 1, 28, 28}, 0)),
                         doctest::Contains("--cuda-graph: capturing the training step needs a "
                                           "CUDA device"),
                         Error);
    // A dropout mask's random offset is a kernel argument: replays would reuse one mask.
    Generator gen(3);
    auto with_dropout = std::make_shared<Sequential>(std::vector<std::shared_ptr<Module>>{
        std::make_shared<Flatten>(), std::make_shared<Linear>(784, 32, gen),
        std::make_shared<Dropout>(0.5, 4), std::make_shared<Linear>(32, 10, gen)});
    auto dropout = make_graph_run(true, Device::cuda(0), with_dropout);
    CHECK_THROWS_WITH_AS(dropout->engine->train_step(graph_batch({4, 1, 28, 28}, 0)),
                         doctest::Contains("needs a model without dropout"), Error);
  }
}

}  // namespace echelon
