// profile_layers (--balance auto) on CPU: one profile per layer, holding the layer's output size
// and finite times, and the model left without gradients (the pipeline trains it next). The CUDA
// side (synchronised clock reads, nothing in flight on return) is tests/gpu/balance_gpu_test.cpp.
#include <doctest/doctest.h>

#include <cmath>

#include <echelon/autograd/grad_mode.h>
#include <echelon/layers/models/registry.h>
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
}
