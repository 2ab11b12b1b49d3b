// The neural-network op families: hand-computed cases, float32 twin vs float64 twin, the naive
// convolution vs the im2col + GEMM path, and every backward against central finite differences
// of its forward in float64. Sizes are odd on purpose (no tile multiples); inputs are random.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/loss.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/cpu/norm.h>
#include <echelon/tensor/cpu/optim.h>
#include <echelon/tensor/cpu/pool.h>
#include <echelon/tensor/ops.h>

namespace echelon {
namespace {

using Vec = std::vector<double>;

Vec random_vec(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<float> to_float(const Vec& v) {
  return std::vector<float>(v.begin(), v.end());
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Largest |a - b| / (atol + rtol * |b|): <= 1 means within tolerance.
double max_violation(const Vec& a, const Vec& b, double atol, double rtol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i])));
  return worst;
}
template <typename F>
double max_violation(const std::vector<F>& a, const Vec& b, double atol, double rtol) {
  return max_violation(Vec(a.begin(), a.end()), b, atol, rtol);
}

// Central differences of the scalar `loss` with respect to every element of `x`, compared with
// the analytic gradient `grad`. float64, eps 1e-6.
void check_gradient(const std::function<double(const Vec&)>& loss, Vec x, const Vec& grad,
                    const char* what, double atol = 1e-6, double rtol = 1e-5) {
  REQUIRE(x.size() == grad.size());
  const double eps = 1e-6;
  Vec numeric(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double up = loss(x);
    x[i] = keep - eps;
    const double down = loss(x);
    x[i] = keep;
    numeric[i] = (up - down) / (2 * eps);
  }
  INFO("gradient of ", what);
  CHECK(max_violation(grad, numeric, atol, rtol) <= 1.0);
}

// The shape every random-geometry conv test uses: odd sizes, stride 2, pad 1, dilation 2.
Conv2dGeometry odd_window() {
  Conv2dGeometry window;
  window.kernel_h = window.kernel_w = 3;
  window.stride_h = window.stride_w = 2, window.pad_h = window.pad_w = 1;
  window.dilation_h = window.dilation_w = 2;
  return window;
}
Conv2dGeometry odd_conv() {
  return odd_window().for_input(3, 5, 11, 9, 4);
}

size_t in_size(const Conv2dGeometry& a) {
  return static_cast<size_t>(a.n * a.c * a.h * a.w);
}
size_t w_size(const Conv2dGeometry& a) {
  return static_cast<size_t>(a.o * a.c * a.kernel_h * a.kernel_w);
}
size_t out_size(const Conv2dGeometry& a) {
  return static_cast<size_t>(a.n * a.o * a.out_h * a.out_w);
}

}  // namespace

TEST_SUITE("nn_ops") {
  // ---- convolution ------------------------------------------------------------------------------

  TEST_CASE("conv2d twin: hand-computed 3x3 input, 2x2 kernel, bias") {
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 2;
    Conv2dGeometry a = window.for_input(1, 1, 3, 3, 1);
    CHECK((a.out_h == 2 && a.out_w == 2));
    const Vec x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, w = {1, 0, 0, -1}, bias = {0.5};
    Vec y(4);
    cpu::conv2d_forward(a, x.data(), w.data(), bias.data(), y.data());
    CHECK(y == Vec{-3.5, -3.5, -3.5, -3.5});  // x[i][j] - x[i+1][j+1] = -4, plus 0.5
    window.pad_h = window.pad_w = 1;
    a = window.for_input(1, 1, 3, 3, 1);
    CHECK((a.out_h == 4 && a.out_w == 4));
    Vec padded(16);
    cpu::conv2d_forward(a, x.data(), w.data(), static_cast<const double*>(nullptr), padded.data());
    CHECK(padded[0] == -1.0);   // only the -1 tap sees pixel (0, 0)
    CHECK(padded[15] == 9.0);   // only the +1 tap sees pixel (2, 2)
    CHECK(padded[5] == 1 - 5);  // (1,1): x[0][0] - x[1][1]
  }

  TEST_CASE("conv2d twin: naive vs the fast path (batched im2col + BLAS), float64 and float32") {
    if (!cpu::blas_available()) return;  // the fast convolution needs OpenBLAS
    const Conv2dGeometry a = odd_conv();
    const Vec x = random_vec(in_size(a), 1), w = random_vec(w_size(a), 2),
              bias = random_vec(a.o, 3), gy = random_vec(out_size(a), 4);
    Vec y(out_size(a)), y_fast(out_size(a)), gx(in_size(a)), gx_fast(in_size(a)), gw(w_size(a)),
        gw_fast(w_size(a));
    cpu::conv2d_forward(a, x.data(), w.data(), bias.data(), y.data());
    cpu::fast::conv2d_forward(a, x.data(), w.data(), bias.data(), y_fast.data());
    CHECK(max_violation(y_fast, y, 1e-12, 1e-10) <= 1.0);
    cpu::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
    cpu::fast::conv2d_backward_input(a, gy.data(), w.data(), gx_fast.data());
    CHECK(max_violation(gx_fast, gx, 1e-12, 1e-10) <= 1.0);
    cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
    cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), gw_fast.data());
    CHECK(max_violation(gw_fast, gw, 1e-12, 1e-10) <= 1.0);

    // float32 twin and float32 fast path against the float64 reference
    const auto xf = to_float(x), wf = to_float(w), bf = to_float(bias), gyf = to_float(gy);
    std::vector<float> yf(out_size(a)), yf_fast(out_size(a)), gxf(in_size(a)), gwf(w_size(a));
    cpu::conv2d_forward(a, xf.data(), wf.data(), bf.data(), yf.data());
    cpu::fast::conv2d_forward(a, xf.data(), wf.data(), bf.data(), yf_fast.data());
    CHECK(max_violation(yf, y, 1e-5, 1e-5) <= 1.0);
    CHECK(max_violation(yf_fast, y, 1e-5, 1e-5) <= 1.0);
    cpu::fast::conv2d_backward_input(a, gyf.data(), wf.data(), gxf.data());
    CHECK(max_violation(gxf, gx, 1e-5, 1e-5) <= 1.0);
    cpu::fast::conv2d_backward_weight(a, gyf.data(), xf.data(), gwf.data());
    CHECK(max_violation(gwf, gw, 1e-4, 1e-5) <= 1.0);
  }

  TEST_CASE("conv2d twin: backward matches finite differences (float64)") {
    const Conv2dGeometry a = odd_window().for_input(2, 3, 7, 6, 2);
    const Vec x = random_vec(in_size(a), 5), w = random_vec(w_size(a), 6),
              bias = random_vec(a.o, 7), r = random_vec(out_size(a), 8);
    // loss = <conv(x, w, b), r>, so grad_out = r.
    auto loss = [&](const Vec& xx, const Vec& ww, const Vec& bb) {
      Vec y(out_size(a));
      cpu::conv2d_forward(a, xx.data(), ww.data(), bb.data(), y.data());
      return dot(y, r);
    };
    Vec gx(in_size(a)), gw(w_size(a)), gb(a.o);
    cpu::conv2d_backward_input(a, r.data(), w.data(), gx.data());
    cpu::conv2d_backward_weight(a, r.data(), x.data(), gw.data());
    cpu::conv2d_backward_bias(a, r.data(), gb.data());
    check_gradient([&](const Vec& v) { return loss(v, w, bias); }, x, gx, "conv input");
    check_gradient([&](const Vec& v) { return loss(x, v, bias); }, w, gw, "conv weight");
    check_gradient([&](const Vec& v) { return loss(x, w, v); }, bias, gb, "conv bias");
  }

  // ---- pooling
  // -----------------------------------------------------------------------------------

  TEST_CASE("pool twins: hand-computed max and average, padding and divisors") {
    const Pool2dGeometry a = Pool2dGeometry{}.for_input(1, 1, 4, 4);  // 2x2 stride 2
    CHECK((a.out_h == 2 && a.out_w == 2));
    const Vec x = {1, 5, 2, 0, 3, 4, 8, 7, -1, -2, 6, 6, -3, -9, 6, 9};
    Vec y(4);
    std::vector<int64_t> idx(4);
    cpu::max_pool2d_forward(a, x.data(), y.data(), idx.data());
    CHECK(y == Vec{5, 8, -1, 9});
    CHECK(idx == std::vector<int64_t>{1, 6, 8, 15});
    cpu::avg_pool2d_forward(a, x.data(), y.data());
    CHECK(y == Vec{13.0 / 4, 17.0 / 4, -15.0 / 4, 27.0 / 4});
    // 3x3 window, stride 2, pad 1 on a 3x3 image: the corner window holds 4 real pixels of 9.
    Pool2dGeometry window3;
    window3.kernel_h = window3.kernel_w = 3, window3.pad_h = window3.pad_w = 1;
    Pool2dGeometry p = window3.for_input(1, 1, 3, 3);
    CHECK((p.out_h == 2 && p.out_w == 2));
    const Vec ones(9, 1.0);
    Vec avg(4);
    cpu::avg_pool2d_forward(p, ones.data(), avg.data());
    CHECK(avg[0] == doctest::Approx(4.0 / 9));
    p.count_include_pad = false;
    cpu::avg_pool2d_forward(p, ones.data(), avg.data());
    CHECK(avg[0] == doctest::Approx(1.0));
  }

  TEST_CASE("pool twins: backward matches finite differences (float64)") {
    Pool2dGeometry window;
    window.kernel_h = 3, window.kernel_w = 2, window.pad_h = 1, window.pad_w = 1;
    window.ceil_mode = true;
    Pool2dGeometry a = window.for_input(2, 3, 7, 9);
    CHECK((a.out_h == 4 && a.out_w == 5));
    const size_t in = static_cast<size_t>(a.n * a.c * a.h * a.w),
                 out = static_cast<size_t>(a.n * a.c * a.out_h * a.out_w);
    const Vec x = random_vec(in, 9), r = random_vec(out, 10);  // distinct values: max is smooth
    std::vector<int64_t> idx(out);
    for (bool include_pad : {true, false}) {
      a.count_include_pad = include_pad;
      Vec g(in);
      cpu::avg_pool2d_backward(a, r.data(), g.data());
      check_gradient(
          [&](const Vec& v) {
            Vec y(out);
            cpu::avg_pool2d_forward(a, v.data(), y.data());
            return dot(y, r);
          },
          x, g, include_pad ? "avg pool (count_include_pad)" : "avg pool");
    }
    Vec y(out), g(in);
    cpu::max_pool2d_forward(a, x.data(), y.data(), idx.data());
    cpu::max_pool2d_backward(a, r.data(), idx.data(), g.data());
    check_gradient(
        [&](const Vec& v) {
          Vec yy(out);
          std::vector<int64_t> ii(out);
          cpu::max_pool2d_forward(a, v.data(), yy.data(), ii.data());
          return dot(yy, r);
        },
        x, g, "max pool");
  }

  // ---- batch norm, LRN, dropout
  // -------------------------------------------------------------------

  TEST_CASE("batch norm twin: hand-computed statistics and running-stat update") {
    NormArgs a;
    a.n = 4, a.c = 1, a.spatial = 1;
    const Vec x = {1, 2, 3, 6}, gamma = {2}, beta = {1};
    Vec y(4), mean(1), invstd(1), rmean = {1.0}, rvar = {1.0};
    cpu::batch_norm_train_forward(a, x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(),
                                  0.1, 1e-5, y.data(), mean.data(), invstd.data());
    // mean 3, biased var (4+1+0+9)/4 = 3.5, unbiased 14/3
    CHECK(mean[0] == doctest::Approx(3.0));
    CHECK(invstd[0] == doctest::Approx(1.0 / std::sqrt(3.5 + 1e-5)));
    CHECK(y[3] == doctest::Approx(2.0 * 3.0 / std::sqrt(3.5 + 1e-5) + 1.0));
    CHECK(rmean[0] == doctest::Approx(0.9 * 1.0 + 0.1 * 3.0));
    CHECK(rvar[0] == doctest::Approx(0.9 * 1.0 + 0.1 * 14.0 / 3.0));
    Vec ye(4);
    cpu::batch_norm_eval_forward(a, x.data(), gamma.data(), beta.data(), rmean.data(), rvar.data(),
                                 1e-5, ye.data());
    CHECK(ye[0] == doctest::Approx(2.0 * (1.0 - rmean[0]) / std::sqrt(rvar[0] + 1e-5) + 1.0));
  }

  TEST_CASE("batch norm twin: backward matches finite differences; float32 vs float64") {
    NormArgs a;
    a.n = 3, a.c = 5, a.spatial = 7;
    const size_t count = static_cast<size_t>(a.n * a.c * a.spatial);
    const Vec x = random_vec(count, 11, -2, 3), gamma = random_vec(a.c, 12, 0.5, 1.5),
              beta = random_vec(a.c, 13), r = random_vec(count, 14);
    auto forward = [&](const Vec& xx, const Vec& gg, const Vec& bb) {
      Vec y(count), m(a.c), s(a.c);
      cpu::batch_norm_train_forward<double>(a, xx.data(), gg.data(), bb.data(), nullptr, nullptr,
                                            0.1, 1e-5, y.data(), m.data(), s.data());
      return y;
    };
    Vec y(count), mean(a.c), invstd(a.c);
    cpu::batch_norm_train_forward<double>(a, x.data(), gamma.data(), beta.data(), nullptr, nullptr,
                                          0.1, 1e-5, y.data(), mean.data(), invstd.data());
    Vec gx(count), gg(a.c), gb(a.c);
    cpu::batch_norm_backward(a, r.data(), x.data(), gamma.data(), mean.data(), invstd.data(),
                             gx.data(), gg.data(), gb.data());
    check_gradient([&](const Vec& v) { return dot(forward(v, gamma, beta), r); }, x, gx,
                   "bn input");
    check_gradient([&](const Vec& v) { return dot(forward(x, v, beta), r); }, gamma, gg,
                   "bn gamma");
    check_gradient([&](const Vec& v) { return dot(forward(x, gamma, v), r); }, beta, gb, "bn beta");

    const auto xf = to_float(x), gf = to_float(gamma), bf = to_float(beta);
    std::vector<float> yf(count), mf(a.c), sf(a.c), rmf(a.c, 0.f), rvf(a.c, 1.f);
    cpu::batch_norm_train_forward(a, xf.data(), gf.data(), bf.data(), rmf.data(), rvf.data(), 0.1,
                                  1e-5, yf.data(), mf.data(), sf.data());
    CHECK(max_violation(yf, y, 1e-5, 1e-5) <= 1.0);
  }

  TEST_CASE("LRN twin: hand-computed window and backward by finite differences") {
    NormArgs one;
    one.n = 1, one.c = 3, one.spatial = 1;
    const Vec x3 = {1, 2, 3};
    Vec y3(3), s3(3);
    cpu::lrn_forward(one, 2, 0.5, 0.75, 2.0, x3.data(), y3.data(), s3.data());
    // size 2: channel c sums x^2 over [c-1, c]
    CHECK(s3[0] == doctest::Approx(2.0 + 0.25 * 1));
    CHECK(s3[2] == doctest::Approx(2.0 + 0.25 * (4 + 9)));
    CHECK(y3[2] == doctest::Approx(3.0 * std::pow(2.0 + 0.25 * 13, -0.75)));

    NormArgs a;
    a.n = 2, a.c = 7, a.spatial = 5;
    const size_t count = static_cast<size_t>(a.n * a.c * a.spatial);
    const Vec x = random_vec(count, 15, -2, 2), r = random_vec(count, 16);
    for (int64_t size : {3, 4}) {
      Vec y(count), scale(count), g(count);
      cpu::lrn_forward(a, size, 0.3, 0.75, 1.5, x.data(), y.data(), scale.data());
      cpu::lrn_backward(a, size, 0.3, 0.75, r.data(), x.data(), y.data(), scale.data(), g.data());
      check_gradient(
          [&](const Vec& v) {
            Vec yy(count), ss(count);
            cpu::lrn_forward(a, size, 0.3, 0.75, 1.5, v.data(), yy.data(), ss.data());
            return dot(yy, r);
          },
          x, g, size == 3 ? "lrn size 3" : "lrn size 4");
    }
  }

  TEST_CASE("dropout mask twin: philox draws, values, keep rate") {
    const PhiloxState state{1234, 77};
    const double p = 0.3;
    std::vector<float> mask(10007);
    cpu::dropout_mask(static_cast<int64_t>(mask.size()), p, state, mask.data());
    int64_t kept = 0;
    for (size_t i = 0; i < mask.size(); ++i) {
      const bool drop = philox_uniform(state, i) < p;
      REQUIRE(mask[i] == (drop ? 0.0f : static_cast<float>(1.0 / (1.0 - p))));
      kept += mask[i] != 0;
    }
    CHECK(std::abs(static_cast<double>(kept) / mask.size() - 0.7) < 0.02);
  }

  // ---- cross-entropy, SGD
  // ---------------------------------------------------------------------------

  TEST_CASE("cross-entropy twin: hand value, stability, bad target, backward") {
    const Vec logits = {1, 2, 3, 1000, 0, -1000};
    const std::vector<int64_t> target = {2, 0};
    Vec lp(6), loss(1);
    CHECK(cpu::cross_entropy_forward(2, 3, logits.data(), target.data(), lp.data(), loss.data()) ==
          -1);
    const double row0 = -(3 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
    CHECK(loss[0] == doctest::Approx(row0 / 2));  // row 1 contributes ~0, not NaN
    CHECK(std::isfinite(lp[5]));
    CHECK(lp[5] == doctest::Approx(-2000.0));
    const std::vector<int64_t> bad = {2, 3};
    CHECK(cpu::cross_entropy_forward(2, 3, logits.data(), bad.data(), lp.data(), loss.data()) == 1);

    const int64_t n = 5, c = 7;
    const Vec x = random_vec(n * c, 17, -3, 3);
    const std::vector<int64_t> t = {0, 6, 3, 3, 1};
    Vec probs(n * c), l(1), g(n * c);
    cpu::cross_entropy_forward(n, c, x.data(), t.data(), probs.data(), l.data());
    const Vec grad_loss = {1.7};
    cpu::cross_entropy_backward(n, c, grad_loss.data(), probs.data(), t.data(), g.data());
    check_gradient(
        [&](const Vec& v) {
          Vec pp(n * c), ll(1);
          cpu::cross_entropy_forward(n, c, v.data(), t.data(), pp.data(), ll.data());
          return 1.7 * ll[0];
        },
        x, g, "cross-entropy");
  }

  TEST_CASE("SGD twin: PyTorch update rules by hand") {
    SGDOptions a;
    a.lr = 0.1, a.momentum = 0.9, a.dampening = 0.2, a.weight_decay = 0.01;
    Vec param = {1.0, -2.0}, buf = {0.0, 0.0};
    const Vec grad = {0.5, 0.25};
    cpu::sgd_step(2, a, /*first_step=*/true, param.data(), grad.data(), buf.data());
    const double g0 = 0.5 + 0.01 * 1.0;  // first step: buf = g
    CHECK(buf[0] == doctest::Approx(g0));
    CHECK(param[0] == doctest::Approx(1.0 - 0.1 * g0));
    const double p0 = param[0];
    cpu::sgd_step(2, a, false, param.data(), grad.data(), buf.data());
    const double g1 = 0.5 + 0.01 * p0, b1 = 0.9 * g0 + 0.8 * g1;
    CHECK(buf[0] == doctest::Approx(b1));
    CHECK(param[0] == doctest::Approx(p0 - 0.1 * b1));
    a.nesterov = true, a.dampening = 0;
    const double p1 = param[0];
    cpu::sgd_step(2, a, false, param.data(), grad.data(), buf.data());
    const double g2 = 0.5 + 0.01 * p1, b2 = 0.9 * b1 + g2;
    CHECK(param[0] == doctest::Approx(p1 - 0.1 * (g2 + 0.9 * b2)));
    SGDOptions plain;
    plain.lr = 0.5;
    Vec q = {3.0};
    const Vec gq = {2.0};
    cpu::sgd_step<double>(1, plain, true, q.data(), gq.data(), nullptr);
    CHECK(q[0] == doctest::Approx(2.0));
    // The moving average follows the new parameter: 0.75 * 4 + 0.25 * (2 - 0.5 * 2).
    plain.ema_decay = 0.75;
    Vec ema = {4.0};
    cpu::sgd_step<double>(1, plain, false, q.data(), gq.data(), nullptr, nullptr, nullptr,
                          ema.data());
    CHECK(q[0] == doctest::Approx(1.0));
    CHECK(ema[0] == doctest::Approx(3.25));
  }
  // ---- the Tensor-level dispatch (tensor/ops_nn*.cpp) -------------------------------------------

  TEST_CASE("ops::conv2d and conv2d_backward match the naive twin (CPU path: GEMM when built)") {
    const Conv2dGeometry a = odd_conv();
    const Vec x = random_vec(in_size(a), 21), w = random_vec(w_size(a), 22),
              bias = random_vec(a.o, 23), gy = random_vec(out_size(a), 24);
    const Tensor tx = Tensor::from_vector(x, {a.n, a.c, a.h, a.w});
    const Tensor tw = Tensor::from_vector(w, {a.o, a.c, a.kernel_h, a.kernel_w});
    const Tensor tb = Tensor::from_vector(bias, {a.o});
    const Tensor tg = Tensor::from_vector(gy, {a.n, a.o, a.out_h, a.out_w});
    const Conv2dGeometry p = odd_window();
    const Tensor y = ops::conv2d(tx, tw, tb, p);
    CHECK(y.shape() == Shape{a.n, a.o, a.out_h, a.out_w});
    Vec ref(out_size(a));
    cpu::conv2d_forward(a, x.data(), w.data(), bias.data(), ref.data());
    CHECK(max_violation(y.to_vector<double>(), ref, 1e-12, 1e-10) <= 1.0);
    const ops::Conv2dGrads grads = ops::conv2d_backward(tg, tx, tw, true, true, p);
    Vec gx(in_size(a)), gw(w_size(a)), gb(a.o);
    cpu::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
    cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
    cpu::conv2d_backward_bias(a, gy.data(), gb.data());
    CHECK(max_violation(grads.input.to_vector<double>(), gx, 1e-12, 1e-10) <= 1.0);
    CHECK(max_violation(grads.weight.to_vector<double>(), gw, 1e-12, 1e-10) <= 1.0);
    CHECK(max_violation(grads.bias.to_vector<double>(), gb, 1e-12, 1e-10) <= 1.0);
    CHECK_FALSE(ops::conv2d_backward(tg, tx, tw, false, false, p).input.defined());
    // input_sum: the gradient added into it in place (double here: computed, then added), and
    // what it must be.
    Tensor sum = Tensor::full(tx.shape(), 0.25, kFloat64);
    const ops::Conv2dGrads added = ops::conv2d_backward(tg, tx, tw, true, true, p, true, sum);
    CHECK(added.input.storage() == sum.storage());
    CHECK(sum.to_vector<double>() == ops::add(grads.input, 0.25).to_vector<double>());
    CHECK_THROWS_WITH_AS(ops::conv2d_backward(tg, tx, tw, true, false, p, true, sum),
                         doctest::Contains("input_sum needs need_input"), Error);
    CHECK_THROWS_WITH_AS(ops::conv2d_backward(tg, tx, tw, true, true, p, true,
                                              Tensor::zeros({a.n, a.c, a.h, a.w + 1}, kFloat64)),
                         doctest::Contains("input_sum"), Error);
    CHECK_THROWS_WITH_AS(ops::conv2d_backward(tg, tx, tw, true, true, p, true,
                                              sum.transpose(2, 3).contiguous().transpose(2, 3)),
                         doctest::Contains("must be contiguous"), Error);
    // A non-contiguous input gives the same result as its contiguous copy.
    const Tensor tx_t = tx.transpose(2, 3).contiguous().transpose(2, 3);
    CHECK(!tx_t.is_contiguous());
    CHECK(ops::conv2d(tx_t, tw, tb, p).to_vector<double>() == y.to_vector<double>());
  }

  TEST_CASE("ops pooling: PyTorch output sizes (ceil mode) and argmax output") {
    const Tensor x = Tensor::from_vector(random_vec(3 * 5 * 11 * 9, 25), {3, 5, 11, 9});
    Pool2dGeometry p;
    p.kernel_h = p.kernel_w = 3, p.stride_h = p.stride_w = 2, p.pad_h = p.pad_w = 1;
    Tensor argmax;
    CHECK(ops::max_pool2d(x, p, &argmax).shape() == Shape{3, 5, 6, 5});
    CHECK(argmax.dtype() == kInt64);
    p.ceil_mode = true;
    p.pad_h = p.pad_w = 0;
    CHECK(ops::avg_pool2d(x, p).shape() == Shape{3, 5, 5, 4});  // ceil((11-3)/2)+1, ceil((9-3)/2)+1
    const Tensor g = ops::avg_pool2d_backward(ops::avg_pool2d(x, p), x.shape(), p);
    CHECK(g.shape() == x.shape());
  }

  TEST_CASE("ops errors name the op and the offending shapes or values") {
    const Tensor x = Tensor::from_vector(random_vec(2 * 3 * 7 * 7, 26), {2, 3, 7, 7});
    const Tensor w4 = Tensor::from_vector(random_vec(4 * 5 * 3 * 3, 27), {4, 5, 3, 3});
    CHECK_THROWS_WITH_AS(ops::conv2d(x, w4, Tensor(), {}),
                         doctest::Contains("conv2d: input [2, 3, 7, 7] has 3 channels"), Error);
    Pool2dGeometry bad;
    bad.kernel_h = bad.kernel_w = 2, bad.pad_h = bad.pad_w = 2;
    CHECK_THROWS_WITH_AS(ops::max_pool2d(x, bad, nullptr), doctest::Contains("max_pool2d: padding"),
                         Error);
    const Tensor logits = Tensor::from_vector(random_vec(3 * 5, 28), {3, 5});
    const Tensor target = Tensor::from_vector<int64_t>({1, 7, 0}, {3});
    CHECK_THROWS_WITH_AS(ops::cross_entropy(logits, target, nullptr),
                         doctest::Contains("target[1] = 7 is not a class index in [0, 5)"), Error);
    const Tensor neg_target = Tensor::from_vector<int64_t>({1, 0, -1}, {3});
    CHECK_THROWS_WITH_AS(ops::cross_entropy(logits, neg_target, nullptr),
                         doctest::Contains("target[2] = -1"), Error);
    Tensor rm, rv;
    const Tensor single = Tensor::from_vector(Vec{1.0, 2.0}, {1, 2});
    CHECK_THROWS_WITH_AS(ops::batch_norm_train(single, Tensor(), Tensor(), rm, rv, 0.1, 1e-5),
                         doctest::Contains("more than 1 value per channel"), Error);
    Tensor param = Tensor::from_vector(Vec{1.0, 2.0}, {2}), buf;
    CHECK_THROWS_WITH_AS(
        ops::sgd_step_(param, Tensor::from_vector(Vec{1.0}, {1}), buf, SGDOptions{.lr = 0.1}, true),
        doctest::Contains("sgd_step_: grad has shape [1], expected [2]"), Error);
  }

  TEST_CASE("ops batch norm, LRN, cross-entropy, SGD agree with their twins") {
    const Vec xv = random_vec(3 * 5 * 7, 29, -1, 2);
    const Tensor x = Tensor::from_vector(xv, {3, 5, 7});
    Tensor rm = Tensor::zeros({5}, kFloat64), rv = Tensor::ones({5}, kFloat64);
    // The naive kernels reproduce the twin bit for bit; the fast path (sums in T within a plane,
    // in double across planes) agrees to rounding.
    ops::set_cpu_kernels(ops::CpuKernels::Naive);
    const auto bn = ops::batch_norm_train(x, Tensor(), Tensor(), rm, rv, 0.1, 1e-5);
    ops::set_cpu_kernels(ops::CpuKernels::Fast);
    Tensor rm_fast = Tensor::zeros({5}, kFloat64), rv_fast = Tensor::ones({5}, kFloat64);
    const auto bn_fast = ops::batch_norm_train(x, Tensor(), Tensor(), rm_fast, rv_fast, 0.1, 1e-5);
    NormArgs a;
    a.n = 3, a.c = 5, a.spatial = 7;
    Vec y(xv.size()), m(5), s(5), rmr(5, 0.0), rvr(5, 1.0);
    cpu::batch_norm_train_forward<double>(a, xv.data(), nullptr, nullptr, rmr.data(), rvr.data(),
                                          0.1, 1e-5, y.data(), m.data(), s.data());
    CHECK(bn.out.to_vector<double>() == y);
    CHECK(rv.to_vector<double>() == rvr);
    CHECK(max_violation(bn_fast.out.to_vector<double>(), y, 1e-12, 1e-12) <= 1.0);
    CHECK(max_violation(rv_fast.to_vector<double>(), rvr, 1e-12, 1e-12) <= 1.0);
    Tensor scale;
    const Tensor l = ops::lrn(x, 3, 1e-2, 0.75, 2.0, &scale);
    Vec ly(xv.size()), ls(xv.size());
    cpu::lrn_forward(a, 3, 1e-2, 0.75, 2.0, xv.data(), ly.data(), ls.data());
    CHECK(l.to_vector<double>() == ly);
    CHECK(scale.to_vector<double>() == ls);

    Generator gen(5);
    const Tensor mask = ops::dropout_mask({3, 37}, 0.5, gen, Device::cpu());
    CHECK(gen.offset() == (3 * 37 + 3) / 4);
    const Tensor mask2 = ops::dropout_mask({3, 37}, 0.5, gen, Device::cpu());
    CHECK(mask.to_vector<float>() != mask2.to_vector<float>());  // fresh counters each call

    Tensor log_probs;
    const Tensor logits = Tensor::from_vector(random_vec(4 * 3, 30, -2, 2), {4, 3});
    const Tensor target = Tensor::from_vector<int64_t>({2, 0, 1, 2}, {4});
    const Tensor loss = ops::cross_entropy(logits, target, &log_probs);
    CHECK(loss.dim() == 0);
    CHECK(loss.item<double>() > 0);
    const Tensor g = ops::cross_entropy_backward(Tensor::scalar(1.0, kFloat64), log_probs, target);
    double row_sum = 0;
    for (int j = 0; j < 3; ++j) row_sum += g.to_vector<double>()[j];
    CHECK(std::abs(row_sum) < 1e-12);  // softmax - one_hot sums to zero per row

    Tensor param = Tensor::from_vector(Vec{1.0, -1.0}, {2}), buf = Tensor::zeros({2}, kFloat64);
    ops::sgd_step_(param, Tensor::from_vector(Vec{0.5, 0.5}, {2}), buf,
                   SGDOptions{.lr = 0.1, .momentum = 0.9}, /*first_step=*/true);
    CHECK(param.to_vector<double>()[0] == doctest::Approx(0.95));
    CHECK(buf.to_vector<double>()[1] == doctest::Approx(0.5));
  }
}

}  // namespace echelon
