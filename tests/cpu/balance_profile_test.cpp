// profile_layers (--balance auto) on CPU: one profile per layer, holding the layer's output size
// and finite times, and the model left without gradients (the pipeline trains it next). The CUDA
// side (synchronised clock reads, nothing in flight on return) is tests/gpu/balance_gpu_test.cpp.
// Also which neighbouring layers the step fuses (Sequential::fuses_with_next), which the profile
// times as one node.
#include <doctest/doctest.h>

#include <cmath>

#include <echelon/autograd/grad_mode.h>
#include <echelon/layers/batch_norm.h>
#include <echelon/layers/flatten.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/pooling.h>
#include <echelon/layers/relu.h>
#include <echelon/layers/sequential.h>
#include <echelon/parallel/balance.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

TEST_SUITE("pipeline_balance") {
  TEST_CASE("profile_layers: a profile per layer with its output bytes; gradients cleared") {
    const auto model = make_model("lenet5", 1, 10, 3);
    Generator gen(5);
    const Tensor sample = ops::rand({8, 1, 28, 28}, gen);
    const std::vector<parallel::LayerProfile> profiles =
        parallel::profile_layers(*model, sample, /*repeats=*/3, /*warmup=*/1);
    REQUIRE(profiles.size() == model->size());
    double total = 0;
    Tensor x = sample;
    for (size_t i = 0; i < profiles.size(); ++i) {
      {
        NoGradGuard no_grad;
        x = model->at(i)->forward(x);
      }
      CHECK_MESSAGE(profiles[i].activation_bytes == x.nbytes(), "layer ", i);
      CHECK(std::isfinite(profiles[i].cost()));
      CHECK(profiles[i].forward_s >= 0);
      CHECK(profiles[i].backward_s >= 0);
      total += profiles[i].cost();
    }
    CHECK(total > 0);  // two convolutions and three linear layers take measurable time
    for (const Tensor& p : model->parameters()) CHECK_FALSE(p.grad().defined());
    CHECK_THROWS_AS(parallel::profile_layers(*model, sample, 0, 1), Error);
  }

  TEST_CASE("fuses_with_next: BatchNorm + ReLU and ReLU + MaxPool2d on images, as forward walks") {
    // 0 BN, 1 ReLU, 2 MaxPool, 3 ReLU, 4 MaxPool, 5 Flatten, 6 ReLU: pairs (0, 1) and (3, 4); the
    // ReLU at 1 would pair with the pooling at 2 too, but forward has consumed it by then.
    Sequential model({std::make_shared<BatchNorm2d>(2), std::make_shared<ReLU>(),
                      std::make_shared<MaxPool2d>(2), std::make_shared<ReLU>(),
                      std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(),
                      std::make_shared<ReLU>()});
    Generator gen(3);
    const Tensor image = ops::randn({2, 2, 8, 8}, gen);
    CHECK(model.fuses_with_next(0, image));
    CHECK(model.fuses_with_next(1, image));  // alone; forward_from(0) ran it already
    CHECK_FALSE(model.fuses_with_next(2, image));
    CHECK(model.fuses_with_next(3, image));
    CHECK_FALSE(model.fuses_with_next(3, ops::randn({2, 8}, gen)));  // not an image
    CHECK_FALSE(model.fuses_with_next(5, image));
    CHECK_FALSE(model.fuses_with_next(6, image));  // the last layer
    CHECK_FALSE(model.fuses_with_next(7, image));  // out of range: no pair, no throw

    size_t ran = 0;
    Tensor x = image;
    std::vector<size_t> starts;
    for (size_t i = 0; i < model.size(); i += ran) {
      starts.push_back(i);
      const bool fused = model.fuses_with_next(i, x);
      x = model.forward_from(i, x, &ran);
      CHECK(ran == (fused ? 2u : 1u));
    }
    CHECK(starts == std::vector<size_t>{0, 2, 3, 5, 6});

    // The profile times both pairs as the step runs them; every layer keeps a positive cost.
    const std::vector<parallel::LayerProfile> profiles =
        parallel::profile_layers(model, image, /*repeats=*/2, /*warmup=*/0);
    REQUIRE(profiles.size() == model.size());
    for (size_t i = 0; i < profiles.size(); ++i) {
      CHECK_MESSAGE(std::isfinite(profiles[i].cost()), "layer ", i);
      CHECK_MESSAGE(profiles[i].forward_s > 0, "layer ", i);
    }
  }
}
