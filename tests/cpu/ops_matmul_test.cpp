// Op families matmul and im2col: naive twin vs OpenBLAS vs float64 on odd sizes with every trans
// flag, strided operands, and the im2col/col2im adjoint property.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>

using namespace echelon;
using ops::MatmulImpl;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed, DType dtype = kFloat64) {
  Generator gen(seed);
  return ops::add(ops::mul(ops::rand(shape, gen, dtype), 2.0), -1.0);
}

std::vector<double> values(const Tensor& t) {
  return t.to_vector<double>();
}

// max |got - want| / (atol + rtol * |want|) <= 1 elementwise.
void check_close(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const auto g = values(got), w = values(want);
  REQUIRE(g.size() == w.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - w[i]) / (atol + rtol * std::abs(w[i])));
  CHECK(worst <= 1.0);
}

// Reference product in float64 by explicit loops: (M, K) x (K, N).
Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  const auto av = values(a), bv = values(b);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> c(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      for (int64_t k = 0; k < K; ++k) c[i * N + j] += av[i * K + k] * bv[k * N + j];
  return Tensor::from_vector(c, {M, N});
}

// Restores the process-wide matmul implementation when a test ends.
struct ImplScope {
  MatmulImpl saved = ops::matmul_impl();
  explicit ImplScope(MatmulImpl impl) { ops::set_matmul_impl(impl); }
  ~ImplScope() { ops::set_matmul_impl(saved); }
};

}  // namespace

TEST_SUITE("ops") {
  TEST_CASE("matmul 37x53x29: naive and BLAS agree with float64 for every trans flag") {
    const int64_t M = 37, K = 53, N = 29;
    const Tensor a64 = uniform({M, K}, 61), b64 = uniform({K, N}, 62);
    const Tensor want = reference_matmul(a64, b64);
    std::vector<MatmulImpl> impls = {MatmulImpl::Naive};
    if (cpu::blas_available()) impls.push_back(MatmulImpl::Blas);
    for (MatmulImpl impl : impls) {
      ImplScope scope(impl);
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (DType dtype : {kFloat64, kFloat32}) {
            INFO("impl ", static_cast<int>(impl), " trans ", ta, tb, " ", dtype_name(dtype));
            // Stored transposed (contiguous) when the flag asks for it.
            const Tensor a = (ta ? ops::transpose(a64, 0, 1) : a64).to(dtype);
            const Tensor b = (tb ? ops::transpose(b64, 0, 1) : b64).to(dtype);
            const Tensor c = ops::matmul(a, b, ta, tb);
            CHECK(c.shape() == Shape{M, N});
            if (dtype == kFloat64)
              check_close(c, want, 1e-13, 1e-12);
            else
              check_close(c, want, 1e-5, 1e-5);
          }
    }
  }

  TEST_CASE("matmul reads transposed and sliced views without changing the result") {
    const Tensor a = uniform({29, 37}, 63), b = uniform({41, 53}, 64);
    const Tensor at = a.transpose(0, 1);                     // (37, 29), unit row stride
    const Tensor bs = b.slice(0, 3, 32).slice(1, 1, 52, 2);  // (29, 26), strided both ways
    const Tensor want = reference_matmul(at.contiguous(), bs.contiguous());
    for (MatmulImpl impl : {MatmulImpl::Naive, MatmulImpl::Auto}) {
      ImplScope scope(impl);
      check_close(ops::matmul(at, bs), want, 1e-13, 1e-12);
    }
  }

  TEST_CASE("gemm_ with beta = 0 ignores NaN in C; alpha and beta scale") {
    const Tensor a = uniform({7, 5}, 65), b = uniform({5, 9}, 66);
    const Tensor ab = reference_matmul(a, b);
    for (MatmulImpl impl : {MatmulImpl::Naive, MatmulImpl::Auto}) {
      ImplScope scope(impl);
      Tensor c = Tensor::full({7, 9}, std::nan(""), kFloat64);
      ops::gemm_(c, a, b, false, false, 1.0, 0.0);
      CHECK(ops::all_finite(c));
      check_close(c, ab, 1e-14, 1e-13);
      const Tensor c0 = uniform({7, 9}, 67);
      Tensor c2 = c0.clone();
      ops::gemm_(c2, a, b, false, false, -0.5, 2.0);
      check_close(c2, ops::add(ops::mul(ab, -0.5), ops::mul(c0, 2.0)), 1e-14, 1e-13);
    }
  }

  TEST_CASE("bmm matches per-batch matmul, including transposed batches") {
    const Tensor a = uniform({3, 11, 7}, 68), b = uniform({3, 13, 7}, 69);
    for (MatmulImpl impl : {MatmulImpl::Naive, MatmulImpl::Auto}) {
      ImplScope scope(impl);
      const Tensor c = ops::bmm(a, b, false, true);  // (3, 11, 13)
      CHECK(c.shape() == Shape{3, 11, 13});
      for (int64_t i = 0; i < 3; ++i)
        check_close(c.select(0, i),
                    reference_matmul(a.select(0, i), b.select(0, i).transpose(0, 1).contiguous()),
                    1e-13, 1e-12);
      const Tensor c2 =
          ops::bmm(a.transpose(1, 2), b.transpose(1, 2), true, false);  // same product
      check_close(c2, c, 1e-13, 1e-12);
    }
  }

  TEST_CASE("im2col on a hand example") {
    // One 3x3 image, 2x2 kernel, stride 1, no pad: 4 columns of 4 values.
    const Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 2;
    const Tensor cols = ops::im2col(x, g);
    CHECK(cols.shape() == Shape{1, 4, 4});
    CHECK(values(cols) == std::vector<double>{1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9});
    g.pad_h = g.pad_w = 1;
    g.stride_h = g.stride_w = 2;
    const Tensor padded = ops::im2col(x, g);  // out 2x2; the first column reads the corner pad
    CHECK(padded.shape() == Shape{1, 4, 4});
    CHECK(values(padded)[0] == 0.0);
    CHECK(values(padded)[3 * 4 + 0] == 1.0);  // row (ki=1, kj=1), column (0, 0) -> x[0][0]
  }

  TEST_CASE("col2im is the adjoint of im2col on odd geometries") {
    struct Case {
      int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
    };
    const Case cases[] = {{2, 3, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1},
                          {1, 2, 11, 6, 3, 2, 2, 1, 0, 1, 1, 1},
                          {3, 1, 9, 9, 3, 3, 2, 3, 2, 1, 2, 1},
                          {1, 4, 5, 7, 1, 1, 1, 1, 0, 0, 1, 1}};
    for (const Case& k : cases) {
      Conv2dGeometry g{k.kh, k.kw, k.sh, k.sw, k.ph, k.pw, k.dh, k.dw};
      const Shape shape{k.n, k.c, k.h, k.w};
      const Tensor x = uniform(shape, 70);
      const Tensor cols = ops::im2col(x, g);
      const Tensor y = uniform(cols.shape(), 71);
      const double lhs = ops::sum(ops::mul(ops::col2im(y, g, shape), x)).item<double>();
      const double rhs = ops::sum(ops::mul(y, cols)).item<double>();
      CHECK(lhs == doctest::Approx(rhs).epsilon(1e-12));
      // float32 twin agrees with float64.
      check_close(ops::im2col(x.to(kFloat32), g), cols, 1e-7, 1e-6);
    }
  }

  TEST_CASE("im2col + matmul equals a direct convolution") {
    const int64_t N = 2, C = 3, H = 8, W = 7, O = 5, KH = 3, KW = 2;
    Conv2dGeometry g{KH, KW, 2, 1, 1, 0, 1, 1};
    const Tensor x = uniform({N, C, H, W}, 72), weight = uniform({O, C, KH, KW}, 73);
    const Conv2dGeometry s = g.for_input(N, C, H, W, O);
    const int64_t OH = s.out_h, OW = s.out_w;
    const Tensor cols = ops::im2col(x, g);  // (N, C*KH*KW, OH*OW)
    const Tensor w2 = weight.view({O, C * KH * KW});
    const auto xv = values(x), wv = values(weight);
    for (int64_t n = 0; n < N; ++n) {
      const auto out = values(ops::matmul(w2, cols.select(0, n)));  // (O, OH*OW)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double acc = 0;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t i = 0; i < KH; ++i)
                for (int64_t j = 0; j < KW; ++j) {
                  const int64_t h = oh * 2 - 1 + i, w = ow + j;
                  if (h >= 0 && h < H && w >= 0 && w < W)
                    acc += xv[((n * C + c) * H + h) * W + w] * wv[((o * C + c) * KH + i) * KW + j];
                }
            CHECK(out[o * OH * OW + oh * OW + ow] == doctest::Approx(acc).epsilon(1e-12));
          }
    }
  }
}
