// Op families elementwise, reduce, shape: results against std:: math and naive loops on random,
// odd-sized, often non-contiguous inputs; float64 finite-difference checks of the backward ops.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <echelon/tensor/ops.h>

using namespace echelon;

namespace {

// Uniform in [lo, hi), deterministic per seed.
Tensor uniform(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
               DType dtype = kFloat64) {
  Generator gen(seed);
  return ops::add(ops::mul(ops::rand(shape, gen, dtype), hi - lo), lo);
}

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double atol,
                 double rtol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element ", i, ": got ", got[i], ", want ", want[i]);
    CHECK(std::abs(got[i] - want[i]) <= atol + rtol * std::abs(want[i]));
  }
}

double reference_unary(UnaryOp op, double x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return std::fabs(x);
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Relu:
      return std::max(x, 0.0);
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Reciprocal:
      return 1.0 / x;
  }
  return 0.0;
}

const UnaryOp kUnaryOps[] = {UnaryOp::Neg,    UnaryOp::Abs,       UnaryOp::Exp,  UnaryOp::Log,
                             UnaryOp::Sqrt,   UnaryOp::Relu,      UnaryOp::Tanh, UnaryOp::Sigmoid,
                             UnaryOp::Square, UnaryOp::Reciprocal};

bool needs_positive(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Reciprocal;
}

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("unary ops match std:: math on strided inputs, float32 and float64") {
    for (UnaryOp op : kUnaryOps) {
      for (DType dtype : {kFloat64, kFloat32}) {
        INFO("op ", name(op), " dtype ", dtype_name(dtype));
        const double lo = needs_positive(op) ? 0.2 : -3.0;
        const Tensor x = uniform({7, 5}, 11, lo, 3.0, dtype).transpose(0, 1);  // (5, 7) strided
        const Tensor y = ops::unary(op, x);
        CHECK(y.shape() == Shape{5, 7});
        CHECK(y.dtype() == dtype);
        std::vector<double> want;
        for (double v : values(x)) want.push_back(reference_unary(op, v));
        check_close(values(y), want, dtype == kFloat32 ? 1e-6 : 1e-15,
                    dtype == kFloat32 ? 1e-6 : 1e-14);
      }
    }
    CHECK(values(ops::relu(Tensor::from_vector<double>({-2.0, 0.0, 3.5}, {3}))) ==
          std::vector<double>{0.0, 0.0, 3.5});
  }

  TEST_CASE("unary_backward matches central differences in float64") {
    const double h = 1e-6;
    for (UnaryOp op : kUnaryOps) {
      INFO("op ", name(op));
      // Keep inputs away from the kinks of abs and relu.
      Tensor x = uniform({3, 7}, 12, needs_positive(op) ? 0.3 : 0.1, 2.0);
      if (!needs_positive(op)) {
        Generator gen(5);
        const Tensor sign =
            ops::add(ops::mul(ops::bernoulli({3, 7}, 0.5, gen, kFloat64), 2.0), -1.0);
        x = ops::mul(x, sign);  // both signs, |x| >= 0.1
      }
      const Tensor g = uniform({3, 7}, 13);
      const Tensor grad = ops::unary_backward(op, g, x, ops::unary(op, x));
      const Tensor plus = ops::unary(op, ops::add(x, h)), minus = ops::unary(op, ops::add(x, -h));
      const Tensor numeric = ops::mul(ops::mul(ops::sub(plus, minus), 1.0 / (2 * h)), g);
      check_close(values(grad), values(numeric), 1e-7, 1e-6);
    }
  }

  TEST_CASE("binary ops broadcast (3,1,5) with (4,1)") {
    const Tensor a = uniform({3, 1, 5}, 21, 0.5, 2.0);
    const Tensor b = uniform({4, 1}, 22, 0.5, 2.0);
    const auto av = values(a), bv = values(b);
    const std::vector<std::pair<BinaryOp, std::function<double(double, double)>>> cases = {
        {BinaryOp::Add, [](double p, double q) { return p + q; }},
        {BinaryOp::Sub, [](double p, double q) { return p - q; }},
        {BinaryOp::Mul, [](double p, double q) { return p * q; }},
        {BinaryOp::Div, [](double p, double q) { return p / q; }},
        {BinaryOp::Max, [](double p, double q) { return std::max(p, q); }},
        {BinaryOp::Min, [](double p, double q) { return std::min(p, q); }},
        {BinaryOp::Pow, [](double p, double q) { return std::pow(p, q); }}};
    for (const auto& each : cases) {  // not a structured binding: INFO's lambda captures `op`
      const BinaryOp op = each.first;
      const auto& fn = each.second;
      INFO("op ", name(op));
      const Tensor out = ops::binary(op, a, b);
      REQUIRE(out.shape() == Shape{3, 4, 5});
      std::vector<double> want;
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j)
          for (int k = 0; k < 5; ++k) want.push_back(fn(av[i * 5 + k], bv[j]));
      check_close(values(out), want, 1e-15, 1e-14);
    }
    // Scalars: a - 0.25 and 1 - a.
    check_close(values(ops::binary_scalar(BinaryOp::Sub, a, 0.25)), values(ops::add(a, -0.25)), 0,
                0);
    std::vector<double> one_minus;
    for (double v : av) one_minus.push_back(1.0 - v);
    check_close(values(ops::binary_scalar(BinaryOp::Sub, a, 1.0, true)), one_minus, 1e-15, 0);
    std::vector<double> cubed;
    for (double v : av) cubed.push_back(v * v * v);
    check_close(values(ops::pow(a, 3.0)), cubed, 1e-14, 1e-14);
  }

  TEST_CASE("eq compares any dtype with broadcasting") {
    const Tensor labels = Tensor::from_vector<int64_t>({0, 2, 1, 2, 2}, {5});
    const Tensor pred = Tensor::from_vector<int64_t>({0, 1, 1, 2, 0}, {5});
    CHECK(ops::eq(labels, pred).to_vector<float>() == std::vector<float>{1, 0, 1, 1, 0});
    CHECK(ops::eq(labels, Tensor::scalar(2, kInt64)).to_vector<float>() ==
          std::vector<float>{0, 1, 0, 1, 1});
  }

  TEST_CASE("fill_, arange, clamp, axpy_, all_finite, cast") {
    CHECK(ops::arange(5).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
    CHECK(ops::arange(3, kFloat32).to_vector<float>() == std::vector<float>{0, 1, 2});
    const Tensor x = uniform({9}, 31, -2.0, 2.0);
    std::vector<double> clamped;
    for (double v : values(x)) clamped.push_back(std::min(std::max(v, -0.5), 0.75));
    CHECK(values(ops::clamp(x, -0.5, 0.75)) == clamped);
    Tensor acc = uniform({9}, 32);
    const auto before = values(acc);
    ops::axpy_(acc, x, -0.5);
    std::vector<double> want;
    for (size_t i = 0; i < before.size(); ++i) want.push_back(before[i] - 0.5 * values(x)[i]);
    check_close(values(acc), want, 1e-15, 0);
    CHECK(ops::all_finite(x));
    Tensor bad = x.clone();
    Tensor one = bad.narrow(0, 4, 1);
    ops::fill_(one, std::numeric_limits<double>::infinity());
    CHECK_FALSE(ops::all_finite(bad));
    ops::fill_(one, std::nan(""));
    CHECK_FALSE(ops::all_finite(bad.to(kFloat32)));
    CHECK(ops::all_finite(Tensor::ones({4}, kInt64)));
    CHECK(ops::cast(Tensor::from_vector<float>({2.9f, -1.5f}, {2}), kInt64).to_vector<int64_t>() ==
          std::vector<int64_t>{2, -1});
  }

  TEST_CASE("reductions over any dims match naive double sums") {
    const Tensor base = uniform({5, 3, 4}, 41);
    const Tensor x = base.permute({1, 2, 0});  // (3, 4, 5), non-contiguous
    const auto xv = values(x);
    auto at = [&](int i, int j, int k) { return xv[(i * 4 + j) * 5 + k]; };
    // Sum over {0, 2} keepdim -> (1, 4, 1).
    const Tensor s = ops::sum(x, {0, -1}, true);
    CHECK(s.shape() == Shape{1, 4, 1});
    std::vector<double> want;
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 5; ++k) acc += at(i, j, k);
      want.push_back(acc);
    }
    check_close(values(s), want, 1e-14, 1e-14);
    // Mean, max, min over dim 1 -> (3, 5).
    const Tensor m = ops::mean(x, {1});
    const Tensor mx = ops::amax(x, {1});
    const Tensor mn = ops::reduce(ReduceOp::Min, x, {1});
    CHECK(m.shape() == Shape{3, 5});
    std::vector<double> wm, wmax, wmin;
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 5; ++k) {
        double acc = 0, hi = -1e9, lo = 1e9;
        for (int j = 0; j < 4; ++j) {
          acc += at(i, j, k);
          hi = std::max(hi, at(i, j, k));
          lo = std::min(lo, at(i, j, k));
        }
        wm.push_back(acc / 4);
        wmax.push_back(hi);
        wmin.push_back(lo);
      }
    check_close(values(m), wm, 1e-15, 1e-14);
    CHECK(values(mx) == wmax);
    CHECK(values(mn) == wmin);
    // All dims -> scalar.
    double total = 0;
    for (double v : xv) total += v;
    const Tensor all = ops::sum(x);
    CHECK(all.dim() == 0);
    CHECK(all.item<double>() == doctest::Approx(total).epsilon(1e-13));
    CHECK(ops::mean(x.to(kFloat32)).item<double>() == doctest::Approx(total / 60).epsilon(1e-5));
  }

  TEST_CASE("argmax picks the first largest element") {
    const Tensor x = uniform({4, 7}, 42);
    const auto xv = values(x);
    const Tensor idx = ops::argmax(x, 1);
    CHECK(idx.dtype() == kInt64);
    CHECK(idx.shape() == Shape{4});
    for (int i = 0; i < 4; ++i) {
      int best = 0;
      for (int j = 1; j < 7; ++j)
        if (xv[i * 7 + j] > xv[i * 7 + best]) best = j;
      CHECK(idx.to_vector<int64_t>()[i] == best);
    }
    CHECK(ops::argmax(x, 0, true).shape() == Shape{1, 7});
    const Tensor tie = Tensor::from_vector<float>({1, 3, 3, 2}, {4});
    CHECK(ops::argmax(tie, 0).item<int64_t>() == 1);
  }

  TEST_CASE("sum_to undoes broadcasting") {
    const Tensor x = uniform({3, 4, 5}, 43);
    const auto xv = values(x);
    const Tensor r = ops::sum_to(x, {4, 1});
    CHECK(r.shape() == Shape{4, 1});
    for (int j = 0; j < 4; ++j) {
      double acc = 0;
      for (int i = 0; i < 3; ++i)
        for (int k = 0; k < 5; ++k) acc += xv[(i * 4 + j) * 5 + k];
      CHECK(values(r)[j] == doctest::Approx(acc).epsilon(1e-13));
    }
    CHECK(ops::sum_to(x, {}).item<double>() == doctest::Approx(ops::sum(x).item<double>()));
    CHECK(ops::sum_to(x, {3, 4, 5}).same(x));
  }

  TEST_CASE("softmax and log_softmax are normalised and stable") {
    const Tensor x = ops::add(uniform({3, 4, 5}, 44, -3, 3), 1000.0);  // large: needs max-shift
    const Tensor y = ops::softmax(x, 1);
    CHECK(ops::all_finite(y));
    check_close(values(ops::sum(y, {1})), std::vector<double>(15, 1.0), 1e-14, 0);
    const Tensor ly = ops::log_softmax(x, 1);
    check_close(values(ops::exp(ly)), values(y), 1e-15, 1e-13);
    const Tensor y_last = ops::softmax(x.to(kFloat32), -1);
    check_close(values(ops::sum(y_last, {-1})), std::vector<double>(12, 1.0), 1e-6, 0);
  }

  TEST_CASE("softmax backward and log_softmax backward match central differences") {
    const double h = 1e-6;
    const Tensor x = uniform({3, 4, 5}, 45, -2, 2);
    const Tensor g = uniform({3, 4, 5}, 46);
    for (bool log : {false, true}) {
      INFO("log ", log);
      auto f = [&](const Tensor& in) {
        return log ? ops::log_softmax(in, 1) : ops::softmax(in, 1);
      };
      const Tensor y = f(x);
      const Tensor analytic =
          log ? ops::log_softmax_backward(g, y, 1) : ops::softmax_backward(g, y, 1);
      // d/dx_k of <g, f(x)>, one coordinate at a time.
      std::vector<double> numeric;
      for (int64_t k = 0; k < x.numel(); ++k) {
        Tensor xp = x.clone(), xm = x.clone();
        Tensor p = xp.view({-1}).narrow(0, k, 1), m = xm.view({-1}).narrow(0, k, 1);
        ops::fill_(p, values(x)[k] + h);
        ops::fill_(m, values(x)[k] - h);
        numeric.push_back((ops::sum(ops::mul(f(xp), g)).item<double>() -
                           ops::sum(ops::mul(f(xm), g)).item<double>()) /
                          (2 * h));
      }
      check_close(values(analytic), numeric, 1e-7, 1e-6);
    }
  }

  TEST_CASE("permute, transpose, concat materialise") {
    const Tensor x = uniform({2, 3, 4}, 51);
    const Tensor p = ops::permute(x, {1, 2, 0});
    CHECK(p.is_contiguous());
    CHECK(p.storage() != x.storage());
    CHECK(values(p) == values(x.permute({1, 2, 0})));
    CHECK(values(ops::transpose(x, 0, 2)) == values(x.transpose(0, 2)));
    const Tensor a = uniform({2, 1, 4}, 52), b = uniform({2, 3, 4}, 53);
    const Tensor c = ops::concat({a, b, a}, 1);
    CHECK(c.shape() == Shape{2, 5, 4});
    CHECK(values(c.narrow(1, 0, 1)) == values(a));
    CHECK(values(c.narrow(1, 1, 3)) == values(b));
    CHECK(values(c.narrow(1, 4, 1)) == values(a));
  }

  TEST_CASE("index_select, gather, one_hot") {
    const Tensor x = uniform({3, 5, 2}, 54);
    const auto xv = values(x);
    const Tensor index = Tensor::from_vector<int64_t>({4, 0, 4, 2}, {4});
    const Tensor s = ops::index_select(x, 1, index);
    CHECK(s.shape() == Shape{3, 4, 2});
    const auto sv = values(s);
    const int64_t picks[] = {4, 0, 4, 2};
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 2; ++j)
          CHECK(sv[(i * 4 + k) * 2 + j] == xv[(i * 5 + picks[k]) * 2 + j]);
    CHECK(ops::index_select(ops::arange(6), 0, index).to_vector<int64_t>() ==
          std::vector<int64_t>{4, 0, 4, 2});

    const Tensor scores = uniform({4, 6}, 55);
    const Tensor targets = Tensor::from_vector<int64_t>({5, 0, 3, 3}, {4, 1});
    const Tensor picked = ops::gather(scores, 1, targets);
    CHECK(picked.shape() == Shape{4, 1});
    for (int i = 0; i < 4; ++i)
      CHECK(values(picked)[i] == values(scores)[i * 6 + targets.to_vector<int64_t>()[i]]);

    const Tensor oh = ops::one_hot(Tensor::from_vector<int64_t>({2, 0, 1}, {3}), 4);
    CHECK(oh.to_vector<float>() == std::vector<float>{0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0});
  }

  TEST_CASE("pad_channels_subsample: the option-A shortcut and its adjoint, in one pass each") {
    // (1, 1, 3, 3) at stride 2, one pad channel each side: (1, 3, 2, 2), x's corners in channel 1.
    const Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
    const Tensor y = ops::pad_channels_subsample(x, 1, 2);
    CHECK(y.shape() == Shape{1, 3, 2, 2});
    CHECK(values(y) == std::vector<double>{0, 0, 0, 0, 1, 3, 7, 9, 0, 0, 0, 0});
    const Tensor g = ops::arange(12, kFloat64).view({1, 3, 2, 2});
    CHECK(values(ops::pad_channels_subsample_backward(g, 1, 2, {1, 1, 3, 3})) ==
          std::vector<double>{4, 0, 5, 0, 0, 0, 6, 0, 7});
    // The adjoint: <y, g> = <x, backward(g)> on odd sizes and a strided x.
    const Tensor big = uniform({2, 3, 10, 7}, 56).slice(2, 0, 10, 2);  // (2, 3, 5, 7), strided
    for (const int64_t stride : {1, 2, 3}) {
      const Tensor out = ops::pad_channels_subsample(big, 2, stride);
      const Tensor grad = uniform(out.shape(), 57);
      const Tensor back = ops::pad_channels_subsample_backward(grad, 2, stride, big.shape());
      CHECK(back.shape() == big.shape());
      CHECK(ops::sum(ops::mul(out, grad)).item<double>() ==
            doctest::Approx(ops::sum(ops::mul(big, back)).item<double>()).epsilon(1e-12));
    }
    CHECK_THROWS_WITH(ops::pad_channels_subsample(ops::arange(6, kFloat64), 1, 2),
                      doctest::Contains("(N, C, H, W)"));
    CHECK_THROWS_WITH(ops::pad_channels_subsample(x, 1, 0), doctest::Contains("stride 0"));
    CHECK_THROWS_WITH(ops::pad_channels_subsample_backward(g, 1, 2, {1, 1, 5, 3}),
                      doctest::Contains("grad shape [1, 3, 2, 2]"));
  }
}
