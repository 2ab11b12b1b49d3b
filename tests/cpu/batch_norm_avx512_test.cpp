// The fast batch norm's AVX-512 per-plane loops (tensor/cpu/fast/nn_avx512.h) against its portable
// ones, bit for bit: plain, + ReLU (its mask read from y, or recomputed from x with the forward's
// scale and shift), + residual + ReLU with the masked gradient stored; plane sizes
// below, between and above the 16- and 32-float blocks (tails in both halves of the lanes), 1 and
// 3 threads; and both within float rounding of the naive twins.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/ops.h>

namespace echelon {
namespace {

// Thread count, kernels and the AVX-512 switch for a scope; restored after.
class NormScope {
 public:
  NormScope(int threads, ops::CpuKernels kernels, bool avx512)
      : threads_(cpu::fast::num_threads()),
        kernels_(ops::cpu_kernels()),
        avx512_(cpu::fast::batch_norm_avx512()) {
    cpu::fast::set_num_threads(threads);
    ops::set_cpu_kernels(kernels);
    cpu::fast::set_batch_norm_avx512(avx512);
  }
  ~NormScope() {
    cpu::fast::set_num_threads(threads_);
    ops::set_cpu_kernels(kernels_);
    cpu::fast::set_batch_norm_avx512(avx512_);
  }
  NormScope(const NormScope&) = delete;
  NormScope& operator=(const NormScope&) = delete;

 private:
  int threads_;
  ops::CpuKernels kernels_;
  bool avx512_;
};

// Every output of a train forward + backward; mode 0: BN, 1: BN + ReLU, 2: BN + residual + ReLU
// with the masked gradient, 3: BN + ReLU with the mask recomputed from x (the forward's
// save_affine; the naive twins make none and read y). A gamma_step changes gamma between the
// forward and the backward (a stale weight).
std::vector<std::vector<float>> run_batch_norm(const Tensor& x, const Tensor& residual, int mode,
                                               double gamma_step = 0.0) {
  Generator gen(5);
  const int64_t c = x.shape()[1];
  Tensor gamma = ops::randn({c}, gen).to(x.dtype());
  const Tensor beta = ops::randn({c}, gen).to(x.dtype());
  const Tensor gy = ops::randn(x.shape(), gen).to(x.dtype());
  Tensor rm = Tensor::zeros({c}, x.dtype()), rv = Tensor::ones({c}, x.dtype());
  const bool relu = mode > 0;
  ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, relu,
                                                 mode == 2 ? residual : Tensor());
  if (gamma_step != 0.0) gamma = ops::add(gamma, gamma_step);
  ops::BatchNormGrads g =
      ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd, relu ? o.out : Tensor(),
                               mode == 2, mode == 3 ? o.save_affine : Tensor());
  std::vector<std::vector<float>> outs;
  for (const Tensor& t : {o.out, o.save_mean, o.save_invstd, rm, rv, g.input, g.gamma, g.beta})
    outs.push_back(t.to(kFloat32).to_vector<float>());
  if (mode == 2) outs.push_back(g.masked.to_vector<float>());
  return outs;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i])) &&
        !(std::isnan(a[i]) && std::isnan(b[i])))
      return false;
  return true;
}

TEST_SUITE("fast_cpu") {
  TEST_CASE("batch norm: AVX-512 loops bit-identical to the portable ones, 1 and 3 threads") {
    if (!cpu::fast::batch_norm_avx512_available()) {
      CHECK_THROWS_WITH_AS(cpu::fast::set_batch_norm_avx512(true), doctest::Contains("no AVX-512"),
                           Error);
      MESSAGE("no AVX-512F on this CPU: only the portable loops run");
      return;
    }
    Generator gen(31);
    // Planes of 1, 15, 16, 25, 32, 35, 63, 64 floats: shorter than one vector, one vector and a
    // tail, whole 32-float blocks, a block and a tail in either half of the lanes.
    for (const std::vector<int64_t>& hw : std::vector<std::vector<int64_t>>{
             {1, 1}, {3, 5}, {4, 4}, {5, 5}, {4, 8}, {5, 7}, {7, 9}, {8, 8}}) {
      const std::vector<int64_t> shape = {5, 3, hw[0], hw[1]};
      const Tensor x = ops::add(ops::mul(ops::randn(shape, gen), 2.0), 0.3);
      const Tensor residual = ops::randn(shape, gen);
      for (int mode = 0; mode < 4; ++mode) {
        CAPTURE(hw[0] * hw[1]);
        CAPTURE(mode);
        std::vector<std::vector<float>> portable, naive;
        {
          NormScope scope(1, ops::CpuKernels::Fast, false);
          portable = run_batch_norm(x, residual, mode);
        }
        {
          NormScope scope(1, ops::CpuKernels::Naive, false);
          naive = run_batch_norm(x, residual, mode);
        }
        for (const int threads : {1, 3})
          for (const bool avx512 : {true, false}) {
            CAPTURE(threads);
            CAPTURE(avx512);
            NormScope scope(threads, ops::CpuKernels::Fast, avx512);
            const std::vector<std::vector<float>> outs = run_batch_norm(x, residual, mode);
            REQUIRE(outs.size() == portable.size());
            for (size_t i = 0; i < outs.size(); ++i) {
              CAPTURE(i);
              CHECK(same_bits(outs[i], portable[i]));
              size_t beyond_rounding = 0;
              for (size_t j = 0; j < outs[i].size(); ++j)
                if (!(std::abs(outs[i][j] - naive[i][j]) <= 1e-4 + 1e-4 * std::abs(naive[i][j])))
                  ++beyond_rounding;
              CHECK(beyond_rounding == 0);
            }
          }
      }
    }
  }

  TEST_CASE("batch norm + ReLU: the mask recomputed from x is bit for bit the mask read from y") {
    Generator gen(32);
    for (const DType dtype : {kFloat32, kFloat64})
      for (const double gamma_step : {0.0, 0.7, -3.0}) {  // -3: some channels change sign
        CAPTURE(dtype);
        CAPTURE(gamma_step);
        const Tensor x = ops::add(ops::mul(ops::randn({6, 4, 5, 7}, gen), 2.0), 0.3).to(dtype);
        for (const int threads : {1, 3})
          for (const bool avx512 : {true, false}) {
            if (avx512 && !cpu::fast::batch_norm_avx512_available()) continue;
            CAPTURE(threads);
            CAPTURE(avx512);
            NormScope scope(threads, ops::CpuKernels::Fast, avx512);
            const auto from_y = run_batch_norm(x, Tensor(), 1, gamma_step);
            const auto from_x = run_batch_norm(x, Tensor(), 3, gamma_step);
            REQUIRE(from_x.size() == from_y.size());
            for (size_t i = 0; i < from_y.size(); ++i) {
              CAPTURE(i);
              CHECK(same_bits(from_x[i], from_y[i]));
            }
          }
      }
    NormScope scope(1, ops::CpuKernels::Fast, cpu::fast::batch_norm_avx512_available());
    const Tensor x = ops::randn({2, 3, 4, 4}, gen), gy = ops::randn({2, 3, 4, 4}, gen);
    Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
    ops::BatchNormOutput o =
        ops::batch_norm_train(x, Tensor(), Tensor(), rm, rv, 0.1, 1e-5, /*relu=*/true);
    REQUIRE(o.save_affine.defined());
    CHECK(o.save_affine.shape() == Shape{3, 2});
    CHECK_FALSE(ops::batch_norm_train(x, Tensor(), Tensor(), rm, rv, 0.1, 1e-5, true, gy)
                    .save_affine.defined());  // with a residual y's mask needs the residual
    CHECK_THROWS_WITH_AS(ops::batch_norm_backward(gy, x, Tensor(), o.save_mean, o.save_invstd,
                                                  o.out, /*want_masked=*/true, o.save_affine),
                         doctest::Contains("relu_affine goes with relu_out"), Error);
    CHECK_THROWS_WITH_AS(ops::batch_norm_backward(gy, x, Tensor(), o.save_mean, o.save_invstd,
                                                  Tensor(), false, o.save_affine),
                         doctest::Contains("relu_affine goes with relu_out"), Error);
    CHECK_THROWS_WITH_AS(ops::batch_norm_backward(gy, x, Tensor(), o.save_mean, o.save_invstd,
                                                  o.out, false, Tensor::zeros({3})),
                         doctest::Contains("relu_affine"), Error);
  }
}

}  // namespace
}  // namespace echelon
