// The backward engine: accumulation, shared subgraphs, retain_graph, hooks, grad mode, errors, and
// the two properties the pipeline relies on (stale weights by reference; backward(out, grad)).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <thread>

#include <echelon/autograd/functions.h>
#include <echelon/layers/layers.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

namespace {
Tensor leaf(const std::vector<float>& values, const Shape& shape) {
  Tensor t = Tensor::from_vector<float>(values, shape);
  t.set_requires_grad(true);
  return t;
}

void check_close(const Tensor& actual, const std::vector<float>& expected, float tol = 1e-5f) {
  REQUIRE(actual.defined());
  std::vector<float> got = actual.to_vector<float>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - expected[i]) <= tol * (1 + std::abs(expected[i])));
  }
}
}  // namespace

TEST_SUITE("autograd") {
  TEST_CASE("gradients accumulate across backward calls and through shared subgraphs") {
    Tensor x = leaf({0.5f, -1.5f, 2.25f}, {3});
    backward(sum(x * x + x));  // d/dx = 2x + 1
    check_close(x.grad(), {2.0f, -2.0f, 5.5f});
    backward(sum(x * 3.0));  // accumulates
    check_close(x.grad(), {5.0f, 1.0f, 8.5f});

    // Diamond: z = (x + 1) * (2x) -> dz/dx = 2x + 2(x + 1) = 4x + 2.
    x.zero_grad();
    Tensor a = x + 1.0, b = x * 2.0;
    backward(sum(a * b));
    check_close(x.grad(), {4.0f, -4.0f, 11.0f});
  }

  TEST_CASE("summed gradients: in place only into a tensor nothing else holds") {
    // Fresh gradients from two consumers: the second is added into the first in place.
    Tensor x = leaf({0.5f, -1.5f, 2.0f}, {3});
    Tensor y = x * 2.0;
    backward(sum(y * 3.0 + y * 5.0));  // dL/dy = 8, dL/dx = 16
    check_close(x.grad(), {16.0f, 16.0f, 16.0f});
    // add hands the same gradient to both inputs: summed into a new tensor, the caller's
    // gradient untouched.
    x.zero_grad();
    Tensor z = x * 2.0;
    const Tensor seed = Tensor::from_vector<float>({1.0f, 2.0f, 3.0f}, {3});
    backward(z + z, seed);  // dL/dz = 2 seed, dL/dx = 4 seed
    check_close(x.grad(), {4.0f, 8.0f, 12.0f});
    check_close(seed, {1.0f, 2.0f, 3.0f});
    // A gradient a hook keeps (add passes p's gradient on to w) is not written afterwards.
    x.zero_grad();
    Tensor c = leaf({1.0f, 1.0f, 1.0f}, {3});
    Tensor w = x * 2.0, p = w + c;
    Tensor seen_p;
    p.register_hook([&seen_p](const Tensor& g) {
      seen_p = g;
      return g;
    });
    backward(sum(p) + sum(w * 5.0));  // dL/dp = 1 (kept), dL/dw = 1 + 5, dL/dx = 12
    check_close(seen_p, {1.0f, 1.0f, 1.0f});
    check_close(x.grad(), {12.0f, 12.0f, 12.0f});
  }

  TEST_CASE("an adding backward gets an input's gradient sum only when nothing else holds it") {
    // probe(h) = h, whose backward records whether it was handed h's sum so far and, if so, adds
    // its gradient into it; `keep` lets the other consumer's gradient be held elsewhere too.
    auto run = [](bool hold_other) {
      Tensor x = leaf({0.5f, -1.5f, 2.0f}, {3});
      Tensor h = x * 2.0;
      bool handed = false;
      Tensor kept;
      Tensor probe = autograd::record_adding(
          "probe", h.detach(), {h},
          [&handed](const Tensor& g, const std::vector<bool>&,
                    const std::vector<Tensor>& sums) -> std::vector<Tensor> {
            handed = sums[0].defined();
            if (!handed) return {g};
            Tensor sum = sums[0];
            ops::axpy_(sum, g, 1.0);
            return {sum};
          });
      Tensor other = autograd::record(
          "times 3", ops::mul(h.detach(), 3.0), {h},
          [&kept, hold_other](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
            Tensor grad = ops::mul(g, 3.0);
            if (hold_other) kept = grad;
            return {grad};
          });
      // The engine runs the last-pushed ready node first: `other`, then the probe.
      backward(sum(probe + other));  // dL/dh = 1 + 3, dL/dx = 8
      check_close(x.grad(), {8.0f, 8.0f, 8.0f});
      if (hold_other) check_close(kept, {3.0f, 3.0f, 3.0f});  // never written
      return handed;
    };
    CHECK(run(false));
    CHECK_FALSE(run(true));
  }

  TEST_CASE(
      "a leaf's first gradient becomes .grad without a copy only when nothing else holds it") {
    // probe(x) = x, whose backward returns 2 g fresh (remembering where its data is), or also kept
    // by the backward, or as a view of a larger tensor.
    enum class Grad { Fresh, Held, View };
    auto run = [](Grad kind) {
      Tensor x = leaf({0.5f, -1.5f, 2.0f}, {3});
      const void* made = nullptr;
      Tensor kept;
      auto probe = [&] {
        return autograd::record(
            "probe", x.detach(), {x},
            [&](const Tensor& g, const std::vector<bool>&) -> std::vector<Tensor> {
              Tensor grad = kind == Grad::View
                                ? ops::mul(ops::concat({g, g}, 0), 2.0).slice(0, 0, 3)
                                : ops::mul(g, 2.0);
              made = grad.raw_data();
              if (kind == Grad::Held) kept = grad;
              return {grad};
            });
      };
      backward(sum(probe() * 3.0));  // dL/dx = 6
      check_close(x.grad(), {6.0f, 6.0f, 6.0f});
      const bool adopted = x.grad().raw_data() == made;
      if (kind == Grad::Held) {
        ops::fill_(kept, 0.0);  // the holder's tensor is not x.grad
        check_close(x.grad(), {6.0f, 6.0f, 6.0f});
      }
      backward(sum(probe()));  // accumulates into x.grad
      check_close(x.grad(), {8.0f, 8.0f, 8.0f});
      return adopted;
    };
    CHECK(run(Grad::Fresh));
    CHECK_FALSE(run(Grad::Held));
    CHECK_FALSE(run(Grad::View));  // a view would keep its whole storage alive
  }

  TEST_CASE("a convolution's input gradient added into the shortcut's, as the separate sum") {
    // ResNet's shapes on the fast path (F(4x4) backward data; the AVX-512 direct kernel at stride
    // 2), LeNet's 5x5 (direct) and every shape on the naive twins (computed, then added): the
    // input's gradient bit for bit the engine's separate add of the shortcut's and the conv's.
    struct Case {
      Shape x, w;
      int64_t stride, pad;
    };
    for (const Case& c :
         {Case{{2, 16, 32, 32}, {16, 16, 3, 3}, 1, 1}, Case{{3, 16, 32, 32}, {32, 16, 3, 3}, 2, 1},
          Case{{3, 6, 14, 14}, {6, 6, 5, 5}, 1, 2}})
      for (const ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
        CAPTURE(c.x);
        CAPTURE(c.stride);
        CAPTURE(kernels == ops::CpuKernels::Fast);
        const ops::CpuKernels before = ops::cpu_kernels();
        ops::set_cpu_kernels(kernels);
        Generator gen(7);
        Tensor a = ops::randn(c.x, gen), w = ops::randn(c.w, gen);
        a.set_requires_grad(true);
        w.set_requires_grad(true);
        Conv2dGeometry window;
        window.kernel_h = window.kernel_w = c.w[2];
        window.stride_h = window.stride_w = c.stride;
        window.pad_h = window.pad_w = c.pad;
        Tensor h = relu(a);
        Tensor y = conv2d(h, w, Tensor(), window);
        const Tensor g = ops::randn(y.shape(), gen), g_shortcut = ops::randn(h.shape(), gen);
        // The shortcut's branch is the later input of +, so the engine runs it first: h's
        // gradient sum holds 0.5 g_shortcut when the convolution's backward runs.
        backward(sum(y * g) + sum(h * 0.5 * g_shortcut));
        const Tensor h_plain = ops::relu(a.detach());
        const Tensor conv_grad =
            ops::conv2d_backward(g, h_plain, w.detach(), false, true, window, false).input;
        const Tensor grad_h = ops::add(ops::mul(g_shortcut, 0.5), conv_grad);
        const Tensor expected = ops::unary_backward(UnaryOp::Relu, grad_h, a.detach(), h_plain);
        CHECK(a.grad().to_vector<float>() == expected.to_vector<float>());
        ops::set_cpu_kernels(before);
      }
  }

  TEST_CASE("retain_graph allows a second backward; without it the graph is freed") {
    Tensor x = leaf({1.5f, -0.5f}, {2});
    Tensor y = sum(exp(x));
    backward(y, {}, /*retain_graph=*/true);
    backward(y);
    check_close(x.grad(), {2 * std::exp(1.5f), 2 * std::exp(-0.5f)});
    CHECK_THROWS_WITH_AS(backward(y), doctest::Contains("second time"), Error);
  }

  TEST_CASE("stale weights: backward reads a parameter updated in place after forward") {
    Tensor x = leaf({1.0f, 2.0f, -1.0f}, {1, 3});
    Tensor w = leaf({0.5f, -0.25f, 1.0f, 2.0f, 0.75f, -1.5f}, {2, 3});
    Tensor y = linear(x, w, Tensor());  // (1, 2)
    // The optimizer of a pipeline stage updates w between this forward and its backward.
    float* wd = w.data<float>();
    for (int i = 0; i < 6; ++i) wd[i] += 1.0f;
    backward(y, Tensor::from_vector<float>({1.0f, 2.0f}, {1, 2}));
    // dL/dx = g W_new: [1.5 + 2*3, 0.75 + 2*1.75, 2 - 2*0.5]
    check_close(x.grad(), {7.5f, 4.25f, 1.0f});
  }

  TEST_CASE("pipeline stage: backward(output, grad_output) fills the stage input's grad") {
    Generator gen(3);
    Linear layer(5, 4, gen);
    Tensor activation = ops::randn({3, 5}, gen);
    // What the previous stage sent: a detached leaf that requires grad.
    Tensor input = activation.detach();
    input.set_requires_grad(true);
    Tensor output = layer.forward(input);
    Tensor grad_output = ops::randn({3, 4}, gen);
    backward(output, grad_output);
    REQUIRE(input.grad().defined());
    CHECK(input.grad().shape() == Shape{3, 5});
    // dL/dinput = G W
    Tensor expected = ops::matmul(grad_output, layer.weight);
    check_close(input.grad(), expected.to_vector<float>());
    check_close(layer.bias.grad(), ops::sum(grad_output, {0}).to_vector<float>());
    CHECK_FALSE(activation.requires_grad());
  }

  TEST_CASE("hooks and retain_grad") {
    Tensor x = leaf({1.0f, 2.0f}, {2});
    x.register_hook([](const Tensor& g) { return ops::mul(g, 10.0); });
    Tensor h = x * 3.0;
    h.retain_grad();
    backward(sum(h * h));  // dL/dh = 2h = [6, 12]; dL/dx = 3 * 2h, then x's hook scales by 10
    check_close(h.grad(), {6.0f, 12.0f});
    check_close(x.grad(), {180.0f, 360.0f});
  }

  TEST_CASE("on_leaf_ready: once per leaf, after its last gradient, before the backward ends") {
    // w2 is used twice (two edges): it is ready only after both have been summed into its grad.
    Tensor x = leaf({1.0f, -2.0f}, {2});
    Tensor w1 = leaf({0.5f, 1.5f}, {2}), w2 = leaf({2.0f, -1.0f}, {2});
    Tensor h = x * w1;
    Tensor y = sum(h * w2 + w2 * 3.0);  // dy/dw2 = h + 3 = [3.5, 0]; dy/dw1 = x * w2 = [2, 2]
    std::vector<std::pair<const TensorImpl*, std::vector<float>>> seen;
    backward(y, {}, false, [&](const TensorImpl& ready) {
      REQUIRE(ready.autograd->grad);
      seen.emplace_back(&ready, ready.autograd->grad->to_vector<float>());
    });
    REQUIRE(seen.size() == 3);
    std::map<const TensorImpl*, std::vector<float>> by_leaf(seen.begin(), seen.end());
    REQUIRE(by_leaf.size() == 3);                                     // each leaf once
    CHECK(by_leaf.at(&w2.impl()) == std::vector<float>{3.5f, 0.0f});  // both edges summed
    CHECK(by_leaf.at(&w1.impl()) == std::vector<float>{2.0f, 2.0f});
    CHECK(by_leaf.at(&x.impl()) == std::vector<float>{1.0f, -1.5f});
    // w2 is ready first: x and w1 still needed the h node when w2's two edges had run.
    CHECK(seen.front().first == &w2.impl());
    // A leaf root is ready at once.
    int calls = 0;
    backward(x, Tensor::ones({2}), false, [&](const TensorImpl&) { ++calls; });
    CHECK(calls == 1);
  }

  TEST_CASE("grad mode is thread-local; NoGradGuard records nothing") {
    Tensor x = leaf({1.0f}, {1});
    {
      NoGradGuard guard;
      CHECK_FALSE(grad_enabled());
      CHECK_FALSE((x * 2.0).requires_grad());
      bool other_thread_enabled = false;
      std::thread t([&] { other_thread_enabled = grad_enabled(); });
      t.join();
      CHECK(other_thread_enabled);
    }
    CHECK(grad_enabled());
    CHECK((x * 2.0).requires_grad());
    CHECK_FALSE((x.detach() * 2.0).requires_grad());
  }

  TEST_CASE("errors name what is wrong") {
    Tensor x = leaf({1.0f, 2.0f}, {2});
    CHECK_THROWS_WITH_AS(backward(x * 2.0), doctest::Contains("non-scalar"), Error);
    CHECK_THROWS_WITH_AS(backward(Tensor::ones({2})), doctest::Contains("does not require grad"),
                         Error);
    CHECK_THROWS_WITH_AS(backward(x * 2.0, Tensor::ones({3})), doctest::Contains("[3]"), Error);
    CHECK_THROWS_AS(matmul(x, x), Error);
    CHECK_THROWS_WITH_AS(linear(Tensor::ones({2, 3}), Tensor::ones({4, 5}), Tensor()),
                         doctest::Contains("[4, 5]"), Error);
  }
}
