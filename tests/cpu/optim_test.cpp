// SGD against hand-computed PyTorch numbers, optimizer checkpoints, and LR schedules.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include <echelon/layers/linear.h>
#include <echelon/layers/optim.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

namespace {
// Runs `steps` SGD steps on p = [1, -2] with the constant gradient [0.5, 0.25]; returns p.
std::vector<float> run_sgd(SGDOptions options, int steps) {
  Tensor p = Tensor::from_vector<float>({1.0f, -2.0f}, {2});
  p.set_requires_grad(true);
  SGD sgd({p}, options);
  for (int i = 0; i < steps; ++i) {
    p.set_grad(Tensor::from_vector<float>({0.5f, 0.25f}, {2}));
    sgd.step();
  }
  return p.to_vector<float>();
}
}  // namespace

TEST_SUITE("optim") {
  TEST_CASE("SGD matches PyTorch's update rules (hand-computed)") {
    // torch.optim.SGD([p], lr=0.1, momentum=0.9): bufs 0.5, 0.95, 1.355 -> p0 0.95, 0.855, 0.7195
    CHECK(run_sgd({.lr = 0.1, .momentum = 0.9}, 3)[0] == doctest::Approx(0.7195).epsilon(1e-6));
    // nesterov: steps use g + 0.9 buf = 0.95, 1.355, 1.7195 -> 0.905, 0.7695, 0.59755
    CHECK(run_sgd({.lr = 0.1, .momentum = 0.9, .nesterov = true}, 3)[0] ==
          doctest::Approx(0.59755).epsilon(1e-6));
    // weight_decay 0.1, no momentum: g = 0.5 + 0.1 p -> 0.94, then 0.94 - 0.1 * 0.594 = 0.8806
    CHECK(run_sgd({.lr = 0.1, .weight_decay = 0.1}, 2)[0] == doctest::Approx(0.8806).epsilon(1e-6));
    // dampening 0.5: buf = 0.5 (first step undamped), then 0.9*0.5 + 0.5*0.5 = 0.7 -> 0.88
    CHECK(run_sgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, 2)[0] ==
          doctest::Approx(0.88).epsilon(1e-6));
    // second element, plain SGD: -2 - 3 * 0.1 * 0.25
    CHECK(run_sgd({.lr = 0.1}, 3)[1] == doctest::Approx(-2.075).epsilon(1e-6));
  }

  TEST_CASE("SGD skips parameters without gradients and rejects bad options") {
    Tensor a = Tensor::from_vector<float>({1.0f}, {1}), b = Tensor::from_vector<float>({2.0f}, {1});
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    SGD sgd({a, b}, {.lr = 0.5});
    a.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
    sgd.step();
    CHECK(a.item<float>() == doctest::Approx(0.5));
    CHECK(b.item<float>() == 2.0f);
    sgd.zero_grad();
    CHECK_FALSE(a.grad().defined());
    CHECK_THROWS_AS(SGD({a}, {.lr = -0.1}), Error);
    CHECK_THROWS_AS(SGD({a}, {.lr = 0.1, .nesterov = true}), Error);
    CHECK_THROWS_AS(sgd.set_lr(-1), Error);
    // lr 0 is where a linear warm-up starts: a step then changes nothing.
    sgd.set_lr(0);
    a.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
    sgd.step();
    CHECK(a.item<float>() == doctest::Approx(0.5));
  }

  TEST_CASE("a parameter whose first gradient comes later starts its momentum buffer then") {
    // a has gradients in steps 1 and 2, b in step 2 only: SGD::step updates them as two lists
    // there (ops::sgd_steps_: first step or not). a: buf 1, p 0.9; buf 1.9, p 0.71. b: buf 1
    // (started at step 2, not an empty buffer's garbage), p 1.9.
    Tensor a = Tensor::from_vector<float>({1.0f}, {1}), b = Tensor::from_vector<float>({2.0f}, {1});
    a.set_requires_grad(true);
    b.set_requires_grad(true);
    SGD sgd({a, b}, {.lr = 0.1, .momentum = 0.9});
    a.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
    sgd.step();
    sgd.zero_grad();
    a.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
    b.set_grad(Tensor::from_vector<float>({1.0f}, {1}));
    sgd.step();
    CHECK(a.item<float>() == doctest::Approx(0.71).epsilon(1e-6));
    CHECK(b.item<float>() == doctest::Approx(1.9).epsilon(1e-6));
    CHECK_THROWS_WITH_AS(
        ops::sgd_steps_({a, b}, {a.grad()}, {Tensor(), Tensor()}, {.lr = 0.1}, false),
        doctest::Contains("2 parameters but 1 gradients"), Error);
  }

  TEST_CASE("momentum buffers round-trip through state_dict") {
    Generator gen(3);
    Tensor p1 = ops::randn({3, 5}, gen);
    Tensor p2 = p1.clone();
    p1.set_requires_grad(true);
    p2.set_requires_grad(true);
    SGDOptions options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
    SGD first({{"fc.weight", p1}}, options);
    Tensor g = ops::randn({3, 5}, gen);
    for (int i = 0; i < 2; ++i) {
      p1.set_grad(g);
      first.step();
    }
    StateDict state = first.state_dict();
    CHECK(state.contains("momentum_buffer.fc.weight"));
    CHECK(state.at("step").item<int64_t>() == 2);

    p2.copy_(p1);
    SGD second({{"fc.weight", p2}}, options);
    second.load_state_dict(state);
    CHECK(second.steps() == 2);
    p1.set_grad(g);
    p2.set_grad(g);
    first.step();
    second.step();
    CHECK(ops::amax(ops::abs(ops::sub(p1, p2))).item<float>() == 0.0f);

    StateDict wrong;
    wrong.insert("momentum_buffer.fc.weight", Tensor::zeros({2}));
    CHECK_THROWS_WITH_AS(second.load_state_dict(wrong), doctest::Contains("[2]"), Error);
    StateDict unknown;
    unknown.insert("momentum_buffer.conv.weight", Tensor::zeros({3, 5}));
    CHECK_THROWS_WITH_AS(second.load_state_dict(unknown), doctest::Contains("conv.weight"), Error);
  }

  TEST_CASE("SGD keeps a moving average of the weights (ema_decay), through state_dict") {
    // p0 = [1, -2], constant gradient [0.5, 0.25], lr 0.1, no momentum: p1 = 0.95, p2 = 0.9 (first
    // element). The average starts at p0: 0.5 * 1 + 0.5 * 0.95 = 0.975, then 0.5 * 0.975 + 0.5 *
    // 0.9.
    Tensor p = Tensor::from_vector<float>({1.0f, -2.0f}, {2});
    p.set_requires_grad(true);
    const SGDOptions options{.lr = 0.1, .ema_decay = 0.5};
    SGD sgd({{"w", p}}, options);
    CHECK_FALSE(sgd.averages()[0].defined());
    for (int i = 0; i < 2; ++i) {
      p.set_grad(Tensor::from_vector<float>({0.5f, 0.25f}, {2}));
      sgd.step();
    }
    CHECK(p.to_vector<float>()[0] == doctest::Approx(0.9));
    CHECK(sgd.averages()[0].to_vector<float>()[0] == doctest::Approx(0.9375));
    const StateDict state = sgd.state_dict();
    REQUIRE(state.contains("ema.w"));
    CHECK_FALSE(state.contains("momentum_buffer.w"));  // momentum 0: no buffer

    // Restored into another optimizer, the average goes on from the same value.
    Tensor q = p.clone();
    q.set_requires_grad(true);
    SGD resumed({{"w", q}}, options);
    resumed.load_state_dict(state);
    p.set_grad(Tensor::from_vector<float>({0.5f, 0.25f}, {2}));
    q.set_grad(Tensor::from_vector<float>({0.5f, 0.25f}, {2}));
    sgd.step();
    resumed.step();
    CHECK(ops::amax(ops::abs(ops::sub(sgd.averages()[0], resumed.averages()[0]))).item<float>() ==
          0.0f);

    // An average where none is kept is refused, naming the flag; so is a decay outside (0, 1).
    SGD plain({{"w", q}}, {.lr = 0.1});
    CHECK_THROWS_WITH_AS(plain.load_state_dict(state), doctest::Contains("--ema"), Error);
    CHECK_THROWS_AS(SGD({q}, {.lr = 0.1, .ema_decay = 1.0}), Error);
    CHECK_THROWS_AS(SGD({q}, {.lr = 0.1, .ema_decay = -0.5}), Error);
  }

  TEST_CASE(
      "AveragedWeights swaps the averages in and the weights back; load_averages keeps them") {
    Generator gen(1);
    Linear layer(2, 1, gen);
    layer.weight.copy_(Tensor::from_vector<float>({1.0f, 2.0f}, {1, 2}));
    layer.bias.copy_(Tensor::from_vector<float>({3.0f}, {1}));
    const Tensor weight = layer.weight;  // the same tensor: the swap keeps the handles
    StateDict state;
    state.insert("ema.weight", Tensor::from_vector<float>({5.0f, 6.0f}, {1, 2}));
    {
      const AveragedWeights averaged(layer, state);
      CHECK(weight.to_vector<float>() == std::vector<float>{5, 6});
      CHECK(layer.bias.to_vector<float>() == std::vector<float>{3});  // no average: kept
    }
    CHECK(weight.to_vector<float>() == std::vector<float>{1, 2});
    // A wrong shape (the bias's, checked after the weight's) is refused before anything changes.
    StateDict wrong;
    wrong.insert("ema.weight", Tensor::zeros({1, 2}));
    wrong.insert("ema.bias", Tensor::zeros({2}));
    CHECK_THROWS_WITH_AS(AveragedWeights(layer, wrong), doctest::Contains("ema.bias"), Error);
    CHECK(weight.to_vector<float>() == std::vector<float>{1, 2});
    CHECK(load_averages(layer, state) == 1);
    CHECK(weight.to_vector<float>() == std::vector<float>{5, 6});
  }

  TEST_CASE("LR schedules") {
    StepLr step(0.1, 2, 0.5);
    CHECK(step.lr_at(1, 7, 10) == doctest::Approx(0.1));
    CHECK(step.lr_at(2, 0, 10) == doctest::Approx(0.05));
    CHECK(step.lr_at(4, 3, 10) == doctest::Approx(0.025));

    MultiStepLr multi(0.1, {2, 5}, 0.1);
    CHECK(multi.lr_at(1, 0, 4) == doctest::Approx(0.1));
    CHECK(multi.lr_at(2, 0, 4) == doctest::Approx(0.01));
    CHECK(multi.lr_at(5, 1, 4) == doctest::Approx(0.001));

    CosineLr cosine(0.1, 10);
    CHECK(cosine.lr_at(0, 0, 10) == doctest::Approx(0.1));
    CHECK(cosine.lr_at(5, 0, 10) == doctest::Approx(0.05));
    CHECK(cosine.lr_at(0, 5, 10) ==
          doctest::Approx(0.05 * (1 + std::cos(std::numbers::pi * 0.05))));
    CHECK(cosine.lr_at(12, 0, 10) == doctest::Approx(0.0));

    WarmupLr warm(std::make_shared<ConstantLr>(0.1), 2.0);
    CHECK(warm.lr_at(0, 0, 10) == doctest::Approx(0.0));
    CHECK(warm.lr_at(0, 5, 10) == doctest::Approx(0.025));
    CHECK(warm.lr_at(1, 0, 10) == doctest::Approx(0.05));
    CHECK(warm.lr_at(2, 0, 10) == doctest::Approx(0.1));

    // Warm-up composes: 1 epoch of warm-up in front of a step schedule.
    auto composed = make_lr_schedule(
        {.kind = "step", .base_lr = 0.2, .gamma = 0.5, .step_size = 1, .warmup_epochs = 1});
    CHECK(composed->lr_at(0, 1, 2) == doctest::Approx(0.1));
    CHECK(composed->lr_at(1, 0, 2) == doctest::Approx(0.1));
    CHECK(composed->lr_at(3, 0, 2) == doctest::Approx(0.025));

    CHECK_THROWS_WITH_AS(make_lr_schedule({.kind = "exp"}), doctest::Contains("'exp'"), Error);
    CHECK_THROWS_AS(make_lr_schedule({.kind = "cosine"}), Error);  // total_epochs missing
    CHECK_THROWS_AS(MultiStepLr(0.1, {5, 2}), Error);
    CHECK_THROWS_AS(step.lr_at(0, 0, 0), Error);
  }
}
