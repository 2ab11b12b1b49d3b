// Float64 finite-difference gradient checks of every differentiable function in
// autograd/functions.h (and the ResNet option-A shortcut), on random inputs with odd sizes.
#include <doctest/doctest.h>

#include <echelon/autograd/functions.h>
#include <echelon/autograd/gradcheck.h>
#include <echelon/layers/basic_block.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

namespace {

using Inputs = std::vector<Tensor>;

// N(0, 1) float64 leaf requiring grad.
Tensor randn64(const Shape& shape, Generator& gen) {
  Tensor t = ops::randn(shape, gen, kFloat64);
  t.set_requires_grad(true);
  return t;
}

// U(lo, hi) float64 leaf requiring grad.
Tensor uniform64(const Shape& shape, double lo, double hi, Generator& gen) {
  Tensor t = ops::add(ops::mul(ops::rand(shape, gen, kFloat64), hi - lo), lo);
  t.set_requires_grad(true);
  return t;
}

// Values in (-2, -0.1) U (0.1, 2): away from relu's kink.
Tensor away_from_zero(const Shape& shape, Generator& gen) {
  Tensor magnitude = ops::add(ops::mul(ops::rand(shape, gen, kFloat64), 1.9), 0.1);
  Tensor sign = ops::add(ops::mul(ops::bernoulli(shape, 0.5, gen, kFloat64), 2.0), -1.0);
  Tensor t = ops::mul(magnitude, sign);
  t.set_requires_grad(true);
  return t;
}

void check(const GradcheckFn& fn, const Inputs& inputs, double atol = 1e-5, double rtol = 1e-3) {
  GradcheckReport report = gradcheck(fn, inputs, 1e-6, atol, rtol);
  CHECK_MESSAGE(report.ok, report.message);
  CHECK(report.checked > 0);
}

}  // namespace

TEST_SUITE("gradcheck") {
  TEST_CASE("broadcasting arithmetic") {
    Generator gen(1);
    Inputs in = {randn64({3, 5}, gen), randn64({1, 5}, gen)};
    check([](const Inputs& x) { return add(x[0], x[1]); }, in);
    check([](const Inputs& x) { return sub(x[0], x[1]); }, in);
    check([](const Inputs& x) { return mul(x[0], x[1]); }, in);
    Inputs pos = {randn64({3, 5}, gen), uniform64({3, 1}, 0.5, 2.0, gen)};
    check([](const Inputs& x) { return div(x[0], x[1]); }, pos);
    Inputs pw = {uniform64({2, 3}, 0.5, 2.0, gen), randn64({3}, gen)};
    check([](const Inputs& x) { return pow(x[0], x[1]); }, pw);
    check([](const Inputs& x) { return x[0] * x[1] - x[0] / 3.0 + 2.0 * x[1]; }, in);
  }

  TEST_CASE("scalar forms and operators") {
    Generator gen(2);
    Inputs in = {uniform64({4, 3}, 0.5, 2.0, gen)};
    check([](const Inputs& x) { return add(x[0], 1.5); }, in);
    check([](const Inputs& x) { return sub(x[0], 0.25); }, in);
    check([](const Inputs& x) { return rsub(2.0, x[0]); }, in);
    check([](const Inputs& x) { return mul(x[0], -1.75); }, in);
    check([](const Inputs& x) { return div(x[0], 3.0); }, in);
    check([](const Inputs& x) { return rdiv(2.0, x[0]); }, in);
    check([](const Inputs& x) { return pow(x[0], 2.5); }, in);
    check([](const Inputs& x) { return 1.0 - x[0] + (-x[0]) * 0.5 + 3.0 / x[0]; }, in);
  }

  TEST_CASE("elementwise") {
    Generator gen(3);
    Inputs any = {randn64({3, 7}, gen)};
    Inputs pos = {uniform64({3, 7}, 0.2, 3.0, gen)};
    Inputs kinked = {away_from_zero({3, 7}, gen)};
    check([](const Inputs& x) { return neg(x[0]); }, any);
    check([](const Inputs& x) { return exp(x[0]); }, any);
    check([](const Inputs& x) { return log(x[0]); }, pos);
    check([](const Inputs& x) { return sqrt(x[0]); }, pos);
    check([](const Inputs& x) { return relu(x[0]); }, kinked);
    check([](const Inputs& x) { return tanh(x[0]); }, any);
    check([](const Inputs& x) { return sigmoid(x[0]); }, any);
    check([](const Inputs& x) { return square(x[0]); }, any);
  }

  TEST_CASE("matmul 2-D and batched") {
    Generator gen(4);
    check([](const Inputs& x) { return matmul(x[0], x[1]); },
          {randn64({3, 5}, gen), randn64({5, 4}, gen)});
    check([](const Inputs& x) { return matmul(x[0], x[1]); },
          {randn64({2, 3, 5}, gen), randn64({2, 5, 3}, gen)});
  }

  TEST_CASE("reductions and softmax") {
    Generator gen(5);
    Inputs in = {randn64({3, 4, 5}, gen)};
    check([](const Inputs& x) { return sum(x[0]); }, in);
    check([](const Inputs& x) { return sum(x[0], {1}); }, in);
    check([](const Inputs& x) { return sum(x[0], {0, -1}, true); }, in);
    check([](const Inputs& x) { return mean(x[0]); }, in);
    check([](const Inputs& x) { return mean(x[0], {2}, true); }, in);
    check([](const Inputs& x) { return softmax(x[0], 1); }, in);
    check([](const Inputs& x) { return log_softmax(x[0], -1); }, in);
  }

  TEST_CASE("shape functions") {
    Generator gen(6);
    Inputs in = {randn64({2, 3, 5}, gen)};
    check([](const Inputs& x) { return mul(reshape(x[0], {5, -1}), 2.0); }, in);
    check([](const Inputs& x) { return mul(view(x[0], {6, 5}), 2.0); }, in);
    check([](const Inputs& x) { return mul(flatten(x[0], 1), 2.0); }, in);
    check([](const Inputs& x) { return mul(transpose(x[0], 0, 2), 2.0); }, in);
    check([](const Inputs& x) { return mul(permute(x[0], {1, 2, 0}), 2.0); }, in);
    check(
        [](const Inputs& x) {
          return concat({x[0], square(x[1])}, 1);
        },
        {randn64({2, 3, 5}, gen), randn64({2, 4, 5}, gen)});
  }

  TEST_CASE("linear") {
    Generator gen(7);
    check([](const Inputs& x) { return linear(x[0], x[1], x[2]); },
          {randn64({3, 5}, gen), randn64({4, 5}, gen), randn64({4}, gen)});
    check([](const Inputs& x) { return linear(x[0], x[1], Tensor()); },
          {randn64({3, 5}, gen), randn64({4, 5}, gen)});
  }

  TEST_CASE("conv2d with stride, padding, dilation") {
    Generator gen(8);
    Conv2dGeometry p;
    p.kernel_h = p.kernel_w = 3;
    check([p](const Inputs& x) { return conv2d(x[0], x[1], x[2], p); },
          {randn64({2, 3, 6, 5}, gen), randn64({4, 3, 3, 3}, gen), randn64({4}, gen)});
    Conv2dGeometry q;
    q.kernel_h = 2, q.kernel_w = 3;
    q.stride_h = 2, q.stride_w = 1, q.pad_h = 1, q.pad_w = 2, q.dilation_h = 2, q.dilation_w = 1;
    check([q](const Inputs& x) { return conv2d(x[0], x[1], Tensor(), q); },
          {randn64({1, 2, 7, 5}, gen), randn64({3, 2, 2, 3}, gen)});
  }

  TEST_CASE("conv2d_relu, fused (fast CPU kernels) and composed (naive), with and without bias") {
    const ops::CpuKernels before = ops::cpu_kernels();
    Generator gen(18);
    Conv2dGeometry p;
    p.kernel_h = 3, p.kernel_w = 2, p.stride_h = 2, p.pad_h = 1, p.pad_w = 1;
    // Random outputs lie ~1e-6 from the ReLU's kink with negligible probability; about half are
    // negative, so the mask zeroes real gradient terms.
    for (ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
      ops::set_cpu_kernels(kernels);
      CAPTURE(kernels == ops::CpuKernels::Fast);
      check([p](const Inputs& x) { return conv2d_relu(x[0], x[1], x[2], p); },
            {randn64({2, 3, 7, 6}, gen), randn64({4, 3, 3, 2}, gen), randn64({4}, gen)});
      check([p](const Inputs& x) { return conv2d_relu(x[0], x[1], Tensor(), p); },
            {randn64({1, 2, 5, 7}, gen), randn64({3, 2, 3, 2}, gen)});
    }
    ops::set_cpu_kernels(before);
  }

  TEST_CASE("linear_relu, fused (fast CPU kernels) and composed (naive), with and without bias") {
    const ops::CpuKernels before = ops::cpu_kernels();
    Generator gen(19);
    for (ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
      ops::set_cpu_kernels(kernels);
      CAPTURE(kernels == ops::CpuKernels::Fast);
      check([](const Inputs& x) { return linear_relu(x[0], x[1], x[2]); },
            {randn64({5, 4}, gen), randn64({3, 4}, gen), randn64({3}, gen)});
      check([](const Inputs& x) { return linear_relu(x[0], x[1], Tensor()); },
            {randn64({2, 3}, gen), randn64({4, 3}, gen)});
    }
    ops::set_cpu_kernels(before);
  }

  TEST_CASE("pooling") {
    Generator gen(9);
    Pool2dGeometry p;  // 2x2 stride 2
    Inputs in = {randn64({2, 3, 5, 7}, gen)};
    check([p](const Inputs& x) { return avg_pool2d(x[0], p); }, in);
    Pool2dGeometry q;
    q.kernel_h = q.kernel_w = 3, q.stride_h = q.stride_w = 2, q.pad_h = q.pad_w = 1;
    check([q](const Inputs& x) { return avg_pool2d(x[0], q); }, in);
    check([](const Inputs& x) { return global_avg_pool2d(x[0]); }, in);
    // Max pooling's backward with its window on both CPU paths; ReLU folded into it (the fast
    // path: one node, ReLU's mask in the backward), away from the ReLU's kink.
    Inputs kinked = {away_from_zero({2, 3, 5, 7}, gen)};
    const ops::CpuKernels before = ops::cpu_kernels();
    for (ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
      ops::set_cpu_kernels(kernels);
      CAPTURE(kernels == ops::CpuKernels::Fast);
      check([p](const Inputs& x) { return max_pool2d(x[0], p); }, in);
      check([q](const Inputs& x) { return max_pool2d(x[0], q); }, in);
      check([p](const Inputs& x) { return relu_max_pool2d(x[0], p); }, kinked);
      check([q](const Inputs& x) { return relu_max_pool2d(x[0], q); }, kinked);
    }
    ops::set_cpu_kernels(before);
  }

  TEST_CASE("batch_norm train and eval, 2-D and 4-D") {
    Generator gen(10);
    for (bool training : {true, false}) {
      for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 3, 5}}) {
        Tensor rm = ops::mul(ops::randn({3}, gen, kFloat64), 0.1);
        Tensor rv = ops::add(ops::rand({3}, gen, kFloat64), 0.5);
        CAPTURE(training);
        check(
            [&, training](const Inputs& x) {
              return batch_norm(x[0], x[1], x[2], rm, rv, training, 0.1, 1e-5);
            },
            {randn64(shape, gen), uniform64({3}, 0.5, 1.5, gen), randn64({3}, gen)});
      }
    }
  }

  TEST_CASE("batch_norm_relu, fused (fast CPU kernels) and composed (naive), train and eval") {
    const ops::CpuKernels before = ops::cpu_kernels();
    Generator gen(16);
    for (ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
      ops::set_cpu_kernels(kernels);
      for (bool training : {true, false}) {
        Tensor rm = ops::mul(ops::randn({3}, gen, kFloat64), 0.1);
        Tensor rv = ops::add(ops::rand({3}, gen, kFloat64), 0.5);
        CAPTURE(training);
        CAPTURE(kernels == ops::CpuKernels::Fast);
        check(
            [&, training](const Inputs& x) {
              return batch_norm_relu(x[0], x[1], x[2], rm, rv, training, 0.1, 1e-5);
            },
            {randn64({2, 3, 3, 5}, gen), uniform64({3}, 0.5, 1.5, gen), randn64({3}, gen)});
      }
    }
    ops::set_cpu_kernels(before);
  }

  TEST_CASE("batch_norm_add_relu, fused (fast CPU kernels) and composed (naive), train and eval") {
    const ops::CpuKernels before = ops::cpu_kernels();
    Generator gen(17);
    for (ops::CpuKernels kernels : {ops::CpuKernels::Fast, ops::CpuKernels::Naive}) {
      ops::set_cpu_kernels(kernels);
      for (bool training : {true, false}) {
        Tensor rm = ops::mul(ops::randn({3}, gen, kFloat64), 0.1);
        Tensor rv = ops::add(ops::rand({3}, gen, kFloat64), 0.5);
        CAPTURE(training);
        CAPTURE(kernels == ops::CpuKernels::Fast);
        check(
            [&, training](const Inputs& x) {
              return batch_norm_add_relu(x[0], x[1], x[2], x[3], rm, rv, training, 0.1, 1e-5);
            },
            {randn64({2, 3, 3, 5}, gen), randn64({2, 3, 3, 5}, gen), uniform64({3}, 0.5, 1.5, gen),
             randn64({3}, gen)});
      }
    }
    ops::set_cpu_kernels(before);
  }

  TEST_CASE("lrn") {
    Generator gen(11);
    check([](const Inputs& x) { return lrn(x[0], 3, 0.1, 0.75, 2.0); },
          {randn64({2, 5, 3, 3}, gen)});
  }

  TEST_CASE("dropout (fixed mask per seed)") {
    Generator gen(12);
    check(
        [](const Inputs& x) {
          Generator mask_gen(99);  // the same mask on every evaluation
          return dropout(x[0], 0.3, true, mask_gen);
        },
        {randn64({4, 7}, gen)});
  }

  TEST_CASE("cross_entropy") {
    Generator gen(13);
    Tensor target = Tensor::from_vector<int64_t>({2, 0, 4, 1}, {4});
    check([target](const Inputs& x) { return cross_entropy(x[0], target); },
          {randn64({4, 5}, gen)});
  }

  TEST_CASE("option-A shortcut") {
    Generator gen(14);
    check([](const Inputs& x) { return option_a_shortcut(x[0], 8, 2); },
          {randn64({2, 4, 5, 3}, gen)});
  }

  TEST_CASE("gradcheck catches a wrong gradient") {
    Generator gen(15);
    // square() whose backward is deliberately off by a factor of 2 at the node level.
    GradcheckFn wrong = [](const Inputs& x) {
      Tensor y = ops::square(x[0]);
      return autograd::record("bad_square", y, {x[0]},
                              [x](const Tensor& g, const std::vector<bool>&) -> Inputs {
                                return {ops::mul(g, x[0])};  // should be 2 * g * x
                              });
    };
    GradcheckReport report = gradcheck(wrong, {randn64({3, 3}, gen)});
    CHECK_FALSE(report.ok);
    CHECK(report.worst_input == 0);
    CHECK(report.message.find("FAILED") != std::string::npos);
  }
}
