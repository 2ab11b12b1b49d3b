// Module mechanics (names, state dicts, train/eval, slicing) and the individual layers.
#include <doctest/doctest.h>

#include <cmath>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/node.h>
#include <echelon/layers/layers.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

#include "tests/support/setting_scope.h"

using namespace echelon;

namespace {
double max_abs_diff(const Tensor& a, const Tensor& b) {
  return ops::amax(ops::abs(ops::sub(a, b))).item<float>();
}
}  // namespace

TEST_SUITE("layers") {
  TEST_CASE("PyTorch-style names for parameters and buffers") {
    auto net = make_model("resnet20", 3, 10, 1);
    NamedTensors params = net->named_parameters();
    CHECK(params.front().first == "0.weight");
    CHECK(params[1].first == "1.weight");
    bool found_block = false;
    for (auto& [name, t] : params) found_block = found_block || name == "3.conv1.weight";
    CHECK(found_block);
    CHECK(params.back().first == "14.bias");
    NamedTensors buffers = net->named_buffers();
    CHECK(buffers[0].first == "1.running_mean");
    CHECK(buffers[1].first == "1.running_var");
    CHECK(buffers[2].first == "1.num_batches_tracked");
    StateDict state = net->state_dict();
    CHECK(state.keys()[0] == "0.weight");
    CHECK(state.keys()[1] == "1.weight");
    CHECK(state.keys()[3] == "1.running_mean");
    CHECK(state.size() == params.size() + buffers.size());
  }

  TEST_CASE("state_dict round trip reproduces outputs; errors name key and shapes") {
    auto a = make_model("lenet5", 1, 10, 1), b = make_model("lenet5", 1, 10, 2);
    Generator gen(5);
    Tensor x = ops::randn({2, 1, 28, 28}, gen);
    NoGradGuard no_grad;
    CHECK(max_abs_diff(a->forward(x), b->forward(x)) > 1e-3);
    Tensor b_weight = b->parameters()[0];
    b->load_state_dict(a->state_dict());
    CHECK(b->parameters()[0].same(b_weight));  // loaded in place: handles stay valid
    CHECK(max_abs_diff(a->forward(x), b->forward(x)) == 0.0);

    auto other = make_model("lenet5", 3, 10, 1, 32);
    CHECK_THROWS_WITH_AS(b->load_state_dict(other->state_dict()),
                         doctest::Contains("'0.weight' has shape [6, 3, 5, 5]"), Error);
    StateDict partial;
    partial.insert("0.bias", a->state_dict().at("0.bias"));
    CHECK_THROWS_WITH_AS(b->load_state_dict(partial), doctest::Contains("missing key '0.weight'"),
                         Error);
    b->load_state_dict(partial, /*strict=*/false);
    StateDict extra = a->state_dict();
    extra.insert("99.weight", Tensor::ones({1}));
    CHECK_THROWS_WITH_AS(b->load_state_dict(extra), doctest::Contains("unexpected key '99.weight'"),
                         Error);
    b->load_state_dict(extra, /*strict=*/false);  // ignored when not strict, as PyTorch
  }

  TEST_CASE("BatchNorm2d: batch statistics in training, running statistics in eval") {
    Generator gen(7);
    BatchNorm2d bn(3);
    Tensor x = ops::add(ops::mul(ops::randn({4, 3, 5, 3}, gen), 2.0), 1.5);
    Tensor y = bn.forward(x);
    // Per-channel mean 0, biased variance 1 after normalisation.
    Tensor mean = ops::mean(y, {0, 2, 3});
    Tensor var = ops::mean(ops::square(y), {0, 2, 3});
    for (float m : mean.to_vector<float>()) CHECK(std::abs(m) < 1e-4);
    for (float v : var.to_vector<float>()) CHECK(std::abs(v - 1.0f) < 1e-3);
    // running_mean = 0.9 * 0 + 0.1 * batch mean
    Tensor batch_mean = ops::mean(x, {0, 2, 3});
    CHECK(max_abs_diff(bn.running_mean, ops::mul(batch_mean, 0.1)) < 1e-5);
    CHECK(bn.num_batches_tracked.item<int64_t>() == 1);

    bn.eval();
    Tensor running_mean_before = bn.running_mean.clone();
    Tensor z = bn.forward(x);
    CHECK(max_abs_diff(bn.running_mean, running_mean_before) == 0.0);  // eval leaves stats alone
    Shape c{1, 3, 1, 1};
    Tensor expected = ops::div(ops::sub(x, bn.running_mean.reshape(c)),
                               ops::sqrt(ops::add(bn.running_var.reshape(c), 1e-5)));
    CHECK(max_abs_diff(z, expected) < 1e-5);
    CHECK_THROWS_WITH_AS(bn.forward(Tensor::ones({2, 4, 3, 3})), doctest::Contains("BatchNorm2d"),
                         Error);
  }

  TEST_CASE("Sequential runs BatchNorm2d + ReLU as one fused node, same values and gradients") {
    Generator gen(8);
    const Tensor x0 = ops::add(ops::randn({4, 3, 5, 7}, gen), 0.3);
    const Tensor gy = ops::randn({4, 3, 5, 7}, gen);
    auto bn = std::make_shared<BatchNorm2d>(3);
    bn->bias = ops::randn({3}, gen);  // the ReLU then cuts part of every channel
    bn->bias.set_requires_grad(true);
    Sequential seq({bn, std::make_shared<ReLU>()});
    Tensor x = x0.clone();
    x.set_requires_grad(true);
    Tensor y = seq.forward(x);
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name() == "batch_norm_relu");
    backward(y, gy);
    // The composition, by hand, on a fresh copy of the same layer.
    BatchNorm2d bn2(3);
    bn2.bias = bn->bias.detach().clone();
    bn2.bias.set_requires_grad(true);
    Tensor x2 = x0.clone();
    x2.set_requires_grad(true);
    Tensor y2 = relu(bn2.forward(x2));
    backward(y2, gy);
    CHECK(max_abs_diff(y, y2) < 1e-5);
    CHECK(max_abs_diff(x.grad(), x2.grad()) < 1e-4);
    CHECK(max_abs_diff(bn->bias.grad(), bn2.bias.grad()) < 1e-4);
    CHECK(max_abs_diff(bn->running_mean, bn2.running_mean) == 0.0);
    seq.eval();  // eval: the composition (no fused node)
    CHECK(max_abs_diff(seq.forward(x0), relu(bn->forward(x0))) == 0.0);
  }

  TEST_CASE("ops::set_fused_ops(false) (--no-fuse): the fusing pairs run as separate nodes") {
    Generator gen(9);
    Tensor x0 = ops::randn({2, 3, 6, 6}, gen);
    x0.set_requires_grad(true);  // the pooling pair has no parameters
    Sequential bn_relu({std::make_shared<BatchNorm2d>(3), std::make_shared<ReLU>()});
    Sequential relu_pool({std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2)});
    for (bool fuse : {true, false}) {
      CAPTURE(fuse);
      ops::set_fused_ops(fuse);
      const Tensor y = bn_relu.forward(x0), pooled = relu_pool.forward(x0);
      ops::set_fused_ops(true);
      REQUIRE(y.grad_fn());
      REQUIRE(pooled.grad_fn());
      CHECK(y.grad_fn()->name() == (fuse ? "batch_norm_relu" : "relu"));
      CHECK(pooled.grad_fn()->name() == (fuse ? "relu_max_pool2d" : "max_pool2d"));
      CHECK(max_abs_diff(pooled,
                         ops::max_pool2d(ops::relu(x0.detach()), Pool2dGeometry(), nullptr)) == 0);
    }
  }

  TEST_CASE(
      "Sequential fuses Conv2d + ReLU (conv2d_relu) unless a MaxPool2d follows; --no-fuse "
      "gives the same bits") {
    Generator gen(10);
    auto conv1 = std::make_shared<Conv2d>(3, 5, 3, Conv2dOptions{1, 1, 1, true}, gen);
    auto conv2 = std::make_shared<Conv2d>(5, 4, 3, Conv2dOptions{2, 0, 1, true}, gen);
    Sequential seq({conv1, std::make_shared<ReLU>(), conv2, std::make_shared<ReLU>(),
                    std::make_shared<MaxPool2d>(2)});
    const Tensor x0 = ops::randn({2, 3, 9, 11}, gen);
    const Tensor gy = ops::randn({2, 4, 2, 2}, gen);
    std::vector<std::vector<Tensor>> got(2);
    for (bool fuse : {true, false}) {
      CAPTURE(fuse);
      ops::set_fused_ops(fuse);
      seq.zero_grad();
      Tensor x = x0.clone();
      x.set_requires_grad(true);
      size_t ran = 0;
      const Tensor h = seq.forward_from(0, x, &ran);
      REQUIRE(h.grad_fn());
      CHECK(h.grad_fn()->name() == (fuse ? "conv2d_relu" : "relu"));
      CHECK(ran == 2);  // the pair is one step either way; --no-fuse composes inside
      // conv2 -> ReLU -> MaxPool2d: the ReLU goes to the pooling (relu_max_pool2d).
      CHECK_FALSE(seq.fuses_with_next(2, h));
      CHECK(seq.fuses_with_next(3, h));
      const Tensor y = seq.forward(x);
      backward(y, gy);
      ops::set_fused_ops(true);
      got[fuse ? 0 : 1] = {y,
                           x.grad(),
                           conv1->weight.grad(),
                           conv1->bias.grad(),
                           conv2->weight.grad(),
                           conv2->bias.grad()};
    }
    for (size_t i = 0; i < got[0].size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(got[0][i], got[1][i]) == 0.0);
    }
  }

  TEST_CASE("Sequential fuses Linear + ReLU (linear_relu); --no-fuse gives the same bits") {
    Generator gen(12);
    auto fc1 = std::make_shared<Linear>(7, 9, gen), fc2 = std::make_shared<Linear>(9, 5, gen);
    auto no_bias = std::make_shared<Linear>(5, 4, gen, /*bias=*/false);
    Sequential seq({fc1, std::make_shared<ReLU>(), fc2, std::make_shared<ReLU>(), no_bias,
                    std::make_shared<ReLU>()});
    const Tensor x0 = ops::randn({6, 7}, gen), gy = ops::randn({6, 4}, gen);
    std::vector<std::vector<Tensor>> got;
    for (const bool fuse : {true, false}) {
      CAPTURE(fuse);
      const test::SettingScope<bool> fused(ops::fused_ops, ops::set_fused_ops, fuse);
      seq.zero_grad();
      Tensor x = x0.clone();
      x.set_requires_grad(true);
      size_t ran = 0;
      const Tensor h = seq.forward_from(0, x, &ran);
      REQUIRE(h.grad_fn());
      CHECK(h.grad_fn()->name() == (fuse ? "linear_relu" : "relu"));
      CHECK(ran == 2);
      CHECK(seq.fuses_with_next(4, ops::randn({6, 5}, gen)));  // without a bias: composed inside
      const Tensor y = seq.forward(x);
      backward(y, gy);
      got.push_back({y, x.grad(), fc1->weight.grad(), fc1->bias.grad(), fc2->weight.grad(),
                     fc2->bias.grad(), no_bias->weight.grad()});
    }
    CHECK(max_abs_diff(got[0][0], ops::relu(got[0][0])) == 0.0);  // clamped
    for (size_t i = 0; i < got[0].size(); ++i) {
      CAPTURE(i);
      CHECK(max_abs_diff(got[0][i], got[1][i]) == 0.0);
    }
  }

  TEST_CASE("Dropout: identity in eval, drops about p and rescales in training") {
    Dropout drop(0.25, 11);
    Tensor x = ops::add(Tensor::ones({64, 33}), 0.5);
    Tensor y = drop.forward(x);
    std::vector<float> v = y.to_vector<float>();
    int64_t zeros = 0;
    for (float e : v) {
      if (e == 0.0f)
        ++zeros;
      else
        CHECK(std::abs(e - 1.5f / 0.75f) < 1e-5);
    }
    CHECK(std::abs(static_cast<double>(zeros) / v.size() - 0.25) < 0.03);
    drop.eval();
    CHECK(max_abs_diff(drop.forward(x), x) == 0.0);
    CHECK_THROWS_AS(Dropout(1.0), Error);
  }

  TEST_CASE("default initialisation is bounded, seeded and not degenerate") {
    Generator g1(42), g2(42);
    Conv2d a(3, 8, 3, Conv2dOptions{.padding = 1}, g1), b(3, 8, 3, Conv2dOptions{.padding = 1}, g2);
    CHECK(max_abs_diff(a.weight, b.weight) == 0.0);
    const double bound = 1.0 / std::sqrt(27.0);
    double largest = ops::amax(ops::abs(a.weight)).item<float>();
    CHECK(largest <= bound);
    CHECK(largest > 0.8 * bound);
    CHECK(ops::amax(ops::abs(a.bias)).item<float>() <= bound);
    CHECK(a.num_parameters() == 8 * 27 + 8);
  }

  TEST_CASE("layers check their input shapes and say which layer failed") {
    Generator gen(1);
    Linear fc(5, 3, gen);
    CHECK_THROWS_WITH_AS(fc.forward(Tensor::ones({2, 4})),
                         doctest::Contains("Linear(in_features=5"), Error);
    auto net = make_model("lenet5", 1, 10, 1);
    CHECK_THROWS_WITH_AS(net->forward(Tensor::ones({2, 3, 28, 28})),
                         doctest::Contains("Sequential layer 0 (Conv2d)"), Error);
  }

  TEST_CASE("Sequential::slice shares layers, keeps names; slices chain to the whole model") {
    auto net = make_model("lenet5", 1, 10, 3);
    auto head = net->slice(0, 4), tail = net->slice(4, net->size());
    CHECK(head->size() == 4);
    CHECK(head->at(0) == net->at(0));
    CHECK(tail->named_parameters().front().first == "7.weight");
    CHECK(head->parameters()[0].same(net->parameters()[0]));
    Generator gen(4);
    Tensor x = ops::randn({3, 1, 28, 28}, gen);
    NoGradGuard no_grad;
    CHECK(max_abs_diff(tail->forward(head->forward(x)), net->forward(x)) == 0.0);
    CHECK_THROWS_AS(net->slice(3, 99), Error);
  }

  TEST_CASE("LocalResponseNorm, pooling and activations shapes; accuracy") {
    Generator gen(8);
    Tensor x = ops::randn({2, 5, 7, 9}, gen);
    CHECK(LocalResponseNorm(3).forward(x).shape() == x.shape());
    CHECK(MaxPool2d(2).forward(x).shape() == Shape{2, 5, 3, 4});
    CHECK(AvgPool2d(3, 2, 1).forward(x).shape() == Shape{2, 5, 4, 5});
    CHECK(GlobalAvgPool2d().forward(x).shape() == Shape{2, 5, 1, 1});
    CHECK(max_abs_diff(Sigmoid().forward(x), ops::sigmoid(x)) == 0.0);
    CHECK(max_abs_diff(Tanh().forward(x), ops::tanh(x)) == 0.0);
    CHECK(Flatten().forward(x).shape() == Shape{2, 315});
    Tensor logits = Tensor::from_vector<float>({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
    Tensor labels = Tensor::from_vector<int64_t>({1, 1, 1}, {3});
    CHECK(correct_count(logits, labels) == 2);
    CHECK(accuracy(logits, labels) == doctest::Approx(2.0 / 3.0));
  }
}
