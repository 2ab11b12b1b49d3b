// The fast CPU path (tensor/cpu/fast) against its oracle, the naive twins: convolution over many
// geometries (odd sizes, stride, padding, dilation, 1x1, groups of one image and of many; ResNet's
// 3x3 / padding 1 and LeNet's 5x5 layers, which float32 runs through the direct AVX2 kernels) and
// thread counts, elementwise and pooling bit for bit, batch norm within float rounding, copies
// between strided views. The thread pool and the caching host allocator: thread_pool_test.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/cpu_cache.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/storage.h>

#include "tests/support/fast_scope.h"

namespace echelon {
namespace {

using test::FastScope;

template <typename T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(dist(rng));
  return v;
}

// Largest |a - b| / (atol + rtol * |b|): <= 1 means within tolerance.
template <typename T>
double violation(const std::vector<T>& a, const std::vector<T>& b, double atol, double rtol) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    worst = std::max(worst, std::isnan(d) ? 1e30 : d / (atol + rtol * std::abs(double(b[i]))));
  }
  return worst;
}

struct ConvCase {
  int64_t n, c, h, w, o, k, stride, pad, dilation;
};

// Forward, backward-input, backward-weight and backward-bias of the fast path against the naive
// twin for one geometry; outputs start as NaN so an unwritten element fails.
template <typename T>
void check_conv(const ConvCase& cc, double atol, double rtol) {
  Conv2dGeometry window;
  window.kernel_h = window.kernel_w = cc.k;
  window.stride_h = window.stride_w = cc.stride;
  window.pad_h = window.pad_w = cc.pad;
  window.dilation_h = window.dilation_w = cc.dilation;
  const Conv2dGeometry a = window.for_input(cc.n, cc.c, cc.h, cc.w, cc.o);
  const auto in = size_t(a.n * a.c * a.h * a.w), wn = size_t(a.o * a.c * a.kernel_h * a.kernel_w),
             out = size_t(a.n * a.o * a.out_h * a.out_w);
  const auto x = random_values<T>(in, 1), w = random_values<T>(wn, 2), b = random_values<T>(a.o, 3),
             gy = random_values<T>(out, 4);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> y(out), y_fast(out, nan), gx(in), gx_fast(in, nan), gw(wn), gw_fast(wn, nan),
      gb(a.o), gb_fast(a.o, nan);
  cpu::conv2d_forward(a, x.data(), w.data(), b.data(), y.data());
  cpu::fast::conv2d_forward(a, x.data(), w.data(), b.data(), y_fast.data());
  CHECK_MESSAGE(violation(y_fast, y, atol, rtol) <= 1.0, "forward");
  cpu::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
  cpu::fast::conv2d_backward_input(a, gy.data(), w.data(), gx_fast.data());
  CHECK_MESSAGE(violation(gx_fast, gx, atol, rtol) <= 1.0, "backward input");
  cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
  cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), gw_fast.data());
  CHECK_MESSAGE(violation(gw_fast, gw, atol, rtol) <= 1.0, "backward weight");
  cpu::conv2d_backward_bias(a, gy.data(), gb.data());
  cpu::fast::conv2d_backward_bias(a, gy.data(), gb_fast.data());
  CHECK_MESSAGE(violation(gb_fast, gb, atol, rtol) <= 1.0, "backward bias");
}

const std::vector<ConvCase> kConvCases = {
    {3, 5, 9, 7, 4, 3, 1, 1, 1},     // odd sizes, same padding
    {2, 3, 11, 13, 6, 3, 2, 1, 1},   // stride 2
    {1, 2, 10, 9, 3, 5, 1, 2, 1},    // 5x5, padding 2 (LeNet's first layer)
    {4, 6, 8, 8, 5, 3, 1, 0, 2},     // dilation 2, no padding
    {5, 7, 6, 5, 3, 1, 1, 0, 1},     // 1x1
    {2, 4, 7, 7, 3, 3, 3, 2, 1},     // stride 3 with padding: columns skip the padded edge
    {7, 1, 12, 12, 2, 5, 1, 0, 1},   // one input channel, many images per GEMM group
    {2, 16, 48, 48, 3, 3, 1, 1, 1},  // large images: one image per GEMM group
    // 3x3, padding 1, stride 1 or 2: float32 takes the direct kernels (conv_direct.h) on AVX2 CPUs
    {3, 16, 32, 32, 16, 3, 1, 1, 1},  // ResNet-20 stage 1
    {2, 16, 32, 32, 32, 3, 2, 1, 1},  // ResNet-20 stage 1 -> 2, stride 2
    {5, 64, 8, 8, 64, 3, 1, 1, 1},    // stage 3: small images, several per weight-gradient run
    {3, 7, 13, 19, 5, 3, 2, 1, 1},    // stride 2, odd sizes: 10 output columns, 5 channels
    {2, 5, 9, 17, 7, 3, 1, 1, 1},     // 17 columns (a 1-lane vector), 7 output channels
    {2, 3, 2, 3, 4, 3, 2, 1, 1},      // a tiny image at stride 2
    {1, 2, 1, 1, 1, 3, 1, 1, 1},      // 1x1 image, one output channel
    {3, 3, 11, 10, 20, 3, 2, 1, 1},   // 20 channels: a 16-wide and an 8-wide weight tile, 4 spare
    {6, 9, 9, 9, 24, 3, 1, 1, 1},     // 81 positions (not whole 8x8 transposes), 3 images a pass
    // 3..5 windows, any padding below K, stride 1 or 2: the direct kernels too (conv_direct.h)
    {9, 1, 28, 28, 6, 5, 1, 2, 1},   // LeNet-5 layer 1: one channel, 28 columns (4 lanes left)
    {5, 6, 14, 14, 16, 5, 1, 0, 1},  // LeNet-5 layer 2: 16 channels = 3+3+3+3+2+2, 10 columns
    {3, 4, 11, 13, 7, 5, 2, 3, 1},   // 5x5 at stride 2, padding 3 (phases start inside the pad)
    {2, 3, 9, 10, 4, 4, 1, 3, 1},    // 4x4, padding 3: the transposed backward has padding 0
    {2, 3, 12, 9, 5, 4, 2, 0, 1},    // 4x4 at stride 2, no padding
    {3, 5, 7, 6, 2, 3, 1, 2, 1},     // 3x3, padding 2: outputs larger than inputs
    {2, 2, 5, 5, 3, 5, 1, 4, 1},     // 5x5, padding 4 on a 5x5 image
    // 3x3 at stride 2: float32's backward data takes im2col / col2im (1 MiB column groups)
    {1, 5, 9, 11, 6, 3, 2, 0, 1},     // one image, no padding, odd sizes
    {3, 13, 15, 13, 11, 3, 2, 1, 1},  // three images, 13 channels (not whole vectors), odd sizes
    {9, 16, 32, 32, 32, 3, 2, 1, 1},  // ResNet-20 stage 1 -> 2: 7 images a group, then 2
};

}  // namespace

TEST_SUITE("fast_cpu") {
  TEST_CASE("conv2d fast path matches the naive twin: geometries x threads, float64 and float32") {
    if (!cpu::blas_available()) return;  // the fast convolution needs OpenBLAS
    for (int threads : {1, 3}) {
      FastScope scope(threads, ops::CpuKernels::Fast);
      for (const ConvCase& cc : kConvCases) {
        CAPTURE(threads);
        CAPTURE(cc.n);
        CAPTURE(cc.c);
        CAPTURE(cc.h);
        CAPTURE(cc.k);
        CAPTURE(cc.stride);
        CAPTURE(cc.pad);
        CAPTURE(cc.dilation);
        check_conv<double>(cc, 1e-12, 1e-10);
        // Winograd F(2x2) (and the direct kernels) within 1e-4 + 1e-4 |y|; F(4x4, 3x3), where
        // AVX-512 takes it (its bound per output: tests/cpu/conv_winograd_test.cpp, 256 eps x
        // sum |x||w|), exceeds that 1.4x on the 64-channel 8x8 case (576 terms): atol 1e-3.
        cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F2x2);
        check_conv<float>(cc, 1e-4, 1e-4);
        cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F4x4);
        check_conv<float>(cc, 1e-3, 1e-4);
      }
    }
  }

  TEST_CASE("the direct kernels take only K x K (3..5) / padding < K / dilation 1 / stride 1, 2") {
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 3;
    g.pad_h = g.pad_w = 1;
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CHECK(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 16)) == avx2);
    g.stride_h = g.stride_w = 2;
    CHECK(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)) == avx2);
    g.kernel_h = g.kernel_w = 5;
    g.pad_h = g.pad_w = 0;
    CHECK(cpu::fast::conv_direct_usable(g.for_input(2, 6, 14, 14, 16)) == avx2);
    g.pad_h = g.pad_w = 4;
    CHECK(cpu::fast::conv_direct_usable(g.for_input(2, 6, 14, 14, 16)) == avx2);
    g.pad_h = g.pad_w = 5;  // padding K: a whole row of taps reads only zeros
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 6, 14, 14, 16)));
    g.pad_h = g.pad_w = 2;
    g.stride_h = g.stride_w = 3;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.stride_h = 1;
    g.stride_w = 2;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.stride_w = 1;
    g.pad_h = 1;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.pad_h = 2;
    g.dilation_w = 2;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.dilation_w = 1;
    g.kernel_h = g.kernel_w = 7;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.kernel_h = g.kernel_w = 1;
    g.pad_h = g.pad_w = 0;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
    g.kernel_h = 3;
    g.kernel_w = 5;
    CHECK_FALSE(cpu::fast::conv_direct_usable(g.for_input(2, 16, 32, 32, 32)));
  }

  TEST_CASE(
      "conv2d weight gradient: an Inf in the last column reaches only the taps that read it") {
    if (!cpu::blas_available()) return;
    FastScope scope(1, ops::CpuKernels::Fast);
    for (int64_t stride : {1, 2}) {
      CAPTURE(stride);
      Conv2dGeometry window;
      window.kernel_h = window.kernel_w = 3;
      window.pad_h = window.pad_w = 1;
      window.stride_h = window.stride_w = stride;
      // 13 columns: the last output vector is partial, its spare lanes lie over column 12
      const Conv2dGeometry a = window.for_input(1, 2, 5, 13, 2);
      auto x = random_values<float>(size_t(2 * 5 * 13), 7);
      x[size_t((0 * 5 + 2) * 13 + 12)] = std::numeric_limits<float>::infinity();
      const auto gy = random_values<float>(size_t(2 * a.out_h * a.out_w), 8);
      std::vector<float> gw(2 * 2 * 9), gw_fast(gw.size());
      cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
      cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), gw_fast.data());
      int finite = 0;
      for (size_t i = 0; i < gw.size(); ++i) {
        CAPTURE(i);
        if (std::isfinite(gw[i])) {
          ++finite;
          CHECK(std::abs(gw_fast[i] - gw[i]) <= 1e-4 + 1e-4 * std::abs(gw[i]));
        } else {
          CHECK_FALSE(std::isfinite(gw_fast[i]));
        }
      }
      CHECK(finite > 0);  // the taps that never read column 12 (kj = 0 at stride 1) stay finite
      CHECK(finite < int(gw.size()));
    }
  }

  TEST_CASE("conv2d backward weight: per-thread partials summed in a fixed order (reproducible)") {
    if (!cpu::blas_available()) return;
    FastScope scope(3, ops::CpuKernels::Fast);
    const Conv2dGeometry a = [] {
      Conv2dGeometry g;
      g.kernel_h = g.kernel_w = 3;
      g.pad_h = g.pad_w = 1;
      return g.for_input(9, 4, 10, 10, 5);
    }();
    const auto x = random_values<float>(size_t(9 * 4 * 100), 5);
    const auto gy = random_values<float>(size_t(9 * 5 * 100), 6);
    std::vector<float> first(5 * 4 * 9), again(first.size());
    cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), first.data());
    for (int i = 0; i < 5; ++i) {
      cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), again.data());
      CHECK(again == first);
    }
  }

  TEST_CASE("elementwise and max pooling: fast path bit-identical to the twins, NaN included") {
    Generator gen(7);
    Tensor x = ops::randn({4, 3, 9, 11}, gen);
    x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
    {
      // Every position of a 2x2 window (row length 11): a NaN bottom-left and bottom-right, two
      // NaNs in one window (the last wins), and a three-way tie (the first wins).
      float* v = x.data<float>();
      const float nan = std::numeric_limits<float>::quiet_NaN();
      v[1 * 11 + 2] = v[3 * 11 + 3] = v[4 * 11 + 0] = v[5 * 11 + 1] = nan;
      v[6 * 11 + 2] = v[6 * 11 + 3] = v[7 * 11 + 3] = 5.0f;
    }
    const Tensor bias = ops::randn({11}, gen), other = ops::randn({4, 3, 9, 11}, gen);
    // 18 pooled columns: two full 8-wide vectors and a 2-wide tail, NaNs in every position.
    Tensor wide = ops::randn({2, 3, 6, 37}, gen);
    for (int64_t i = 0; i < wide.numel(); i += 7)
      wide.data<float>()[i] = std::numeric_limits<float>::quiet_NaN();
    Pool2dGeometry pool2, pool3;
    pool3.kernel_h = pool3.kernel_w = 3;
    pool3.pad_h = pool3.pad_w = 1;
    pool3.ceil_mode = true;
    auto run_all = [&] {
      Tensor argmax2, argmax3;
      std::vector<Tensor> outs = {ops::relu(x),
                                  ops::add(x, bias),
                                  ops::sub(bias, x),
                                  ops::mul(x, other),
                                  ops::maximum(other, x),
                                  ops::mul(x, 0.5),
                                  ops::binary_scalar(BinaryOp::Sub, x, 1.0, true),
                                  ops::unary_backward(UnaryOp::Relu, other, x, ops::relu(x)),
                                  ops::tanh(x),
                                  ops::max_pool2d(x, pool2, &argmax2),
                                  ops::max_pool2d(x, pool3, &argmax3),
                                  x.clone()};
      outs.push_back(ops::max_pool2d_backward(ops::relu(outs[9]), argmax2, x.shape()));
      outs.push_back(argmax2.to(kFloat32));
      outs.push_back(argmax3.to(kFloat32));
      Tensor argmax_wide;
      outs.push_back(ops::max_pool2d(wide, pool2, &argmax_wide));
      outs.push_back(argmax_wide.to(kFloat32));
      return outs;
    };
    std::vector<Tensor> naive, fast;
    {
      FastScope scope(1, ops::CpuKernels::Naive);
      naive = run_all();
    }
    {
      FastScope scope(2, ops::CpuKernels::Fast);
      fast = run_all();
    }
    REQUIRE(naive.size() == fast.size());
    for (size_t i = 0; i < naive.size(); ++i) {
      CAPTURE(i);
      const std::vector<float> a = naive[i].to_vector<float>(), b = fast[i].to_vector<float>();
      REQUIRE(a.size() == b.size());
      for (size_t j = 0; j < a.size(); ++j)
        CHECK(((a[j] == b[j]) || (std::isnan(a[j]) && std::isnan(b[j]))));
    }
  }

  TEST_CASE("batch norm: fast path within float rounding of the twin, forward and backward") {
    Generator gen(11);
    const Tensor x = ops::add(ops::mul(ops::randn({6, 5, 7, 9}, gen), 3.0), 10.0);  // |mean| >> 0
    const Tensor gamma = ops::randn({5}, gen), beta = ops::randn({5}, gen);
    const Tensor gy = ops::randn(x.shape(), gen);
    auto run = [&] {
      Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
      ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5);
      ops::BatchNormGrads g = ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd);
      return std::vector<Tensor>{o.out, o.save_mean, o.save_invstd, rm,
                                 rv,    g.input,     g.gamma,       g.beta};
    };
    std::vector<Tensor> naive, fast;
    {
      FastScope scope(1, ops::CpuKernels::Naive);
      naive = run();
    }
    {
      FastScope scope(2, ops::CpuKernels::Fast);
      fast = run();
    }
    for (size_t i = 0; i < naive.size(); ++i) {
      CAPTURE(i);
      CHECK(violation(fast[i].to_vector<float>(), naive[i].to_vector<float>(), 1e-4, 1e-4) <= 1.0);
    }
  }

  TEST_CASE("batch norm: statistics as the twin's when |mean| >> std (no cancellation)") {
    // mean 1000, std 0.5: a one-pass sum of squares in float would lose the variance outright.
    Generator gen(21);
    const Tensor x = ops::add(ops::mul(ops::randn({9, 4, 13, 11}, gen), 0.5), 1000.0);
    const Tensor gamma = ops::randn({4}, gen), beta = ops::randn({4}, gen);
    auto run = [&](bool relu) {
      Tensor rm = Tensor::zeros({4}), rv = Tensor::ones({4});
      ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, relu);
      return std::vector<Tensor>{o.save_mean, o.save_invstd, rm, rv, o.out};
    };
    for (const bool relu : {false, true}) {
      CAPTURE(relu);
      std::vector<Tensor> naive, fast;
      {
        FastScope scope(1, ops::CpuKernels::Naive);
        naive = run(relu);
      }
      {
        FastScope scope(2, ops::CpuKernels::Fast);
        fast = run(relu);
      }
      for (size_t i = 0; i < 4; ++i) {  // the statistics, then the running ones
        CAPTURE(i);
        CHECK(violation(fast[i].to_vector<float>(), naive[i].to_vector<float>(), 0.0, 1e-5) <= 1.0);
      }
      // The output carries the float rounding of x's mean (~1e-4 of 1000) times invstd (~2).
      CHECK(violation(fast[4].to_vector<float>(), naive[4].to_vector<float>(), 2e-3, 1e-4) <= 1.0);
    }
  }

  TEST_CASE("batch norm + ReLU fused: within float rounding of the twins' BN, then ReLU") {
    Generator gen(12);
    // Odd sizes; beta ~ N(0, 1), so the ReLU cuts part of every channel.
    const Tensor x = ops::add(ops::mul(ops::randn({5, 3, 7, 9}, gen), 2.0), 0.3);
    const Tensor gamma = ops::randn({3}, gen), beta = ops::randn({3}, gen);
    const Tensor gy = ops::randn(x.shape(), gen);
    auto fused = [&] {
      Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
      ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true);
      ops::BatchNormGrads g =
          ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd, o.out);
      return std::vector<Tensor>{o.out, o.save_mean, o.save_invstd, rm,
                                 rv,    g.input,     g.gamma,       g.beta};
    };
    std::vector<Tensor> composed, naive_fused, fast_fused;
    {
      FastScope scope(1, ops::CpuKernels::Naive);
      Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
      ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5);
      const Tensor y = ops::relu(o.out);
      const Tensor masked = ops::unary_backward(UnaryOp::Relu, gy, o.out, y);
      ops::BatchNormGrads g =
          ops::batch_norm_backward(masked, x, gamma, o.save_mean, o.save_invstd);
      composed = {y, o.save_mean, o.save_invstd, rm, rv, g.input, g.gamma, g.beta};
      naive_fused = fused();
    }
    {
      FastScope scope(2, ops::CpuKernels::Fast);
      fast_fused = fused();
    }
    const std::vector<float> y = composed[0].to_vector<float>();
    const auto zeros = std::count(y.begin(), y.end(), 0.0f);
    CHECK(zeros > static_cast<std::ptrdiff_t>(y.size() / 10));  // the mask matters
    CHECK(zeros < static_cast<std::ptrdiff_t>(9 * y.size() / 10));
    for (size_t i = 0; i < composed.size(); ++i) {
      CAPTURE(i);
      CHECK(naive_fused[i].to_vector<float>() == composed[i].to_vector<float>());
      CHECK(violation(fast_fused[i].to_vector<float>(), composed[i].to_vector<float>(), 1e-4,
                      1e-4) <= 1.0);
    }
    FastScope scope(2, ops::CpuKernels::Fast);
    Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
    ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true);
    CHECK_THROWS_WITH_AS(ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd,
                                                  Tensor::zeros({5, 3, 7, 8})),
                         doctest::Contains("relu_out"), Error);
  }

  TEST_CASE("batch norm + residual add + ReLU fused: within float rounding of the composition") {
    Generator gen(21);
    const Tensor x = ops::add(ops::mul(ops::randn({6, 5, 3, 11}, gen), 1.5), -0.4);
    const Tensor gamma = ops::randn({5}, gen), beta = ops::randn({5}, gen);
    const Tensor gy = ops::randn(x.shape(), gen);
    // A non-contiguous residual: every other channel of a wider tensor.
    const Tensor wide = ops::randn({6, 10, 3, 11}, gen);
    const Tensor residual = wide.slice(1, 0, 10, 2);
    REQUIRE(!residual.is_contiguous());
    auto fused = [&] {
      Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
      ops::BatchNormOutput o =
          ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true, residual);
      ops::BatchNormGrads g = ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd,
                                                       o.out, /*want_masked=*/true);
      return std::vector<Tensor>{o.out,   o.save_mean, o.save_invstd, rm,      rv,
                                 g.input, g.gamma,     g.beta,        g.masked};
    };
    std::vector<Tensor> composed, naive_fused, fast_fused;
    {
      FastScope scope(1, ops::CpuKernels::Naive);
      Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
      ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5);
      const Tensor sum = ops::add(o.out, residual);
      const Tensor y = ops::relu(sum);
      const Tensor masked = ops::unary_backward(UnaryOp::Relu, gy, sum, y);
      ops::BatchNormGrads g =
          ops::batch_norm_backward(masked, x, gamma, o.save_mean, o.save_invstd);
      composed = {y, o.save_mean, o.save_invstd, rm, rv, g.input, g.gamma, g.beta, masked};
      naive_fused = fused();
    }
    std::vector<Tensor> one_thread;
    for (int threads : {1, 3}) {
      FastScope scope(threads, ops::CpuKernels::Fast);
      fast_fused = fused();
      if (threads == 1) one_thread = fast_fused;
      for (size_t i = 0; i < fast_fused.size(); ++i)  // fixed-order sums: any thread count
        CHECK(fast_fused[i].to_vector<float>() == one_thread[i].to_vector<float>());
      const std::vector<float> y = composed[0].to_vector<float>();
      const auto zeros = std::count(y.begin(), y.end(), 0.0f);
      CHECK(zeros > static_cast<std::ptrdiff_t>(y.size() / 10));  // the mask matters
      CHECK(zeros < static_cast<std::ptrdiff_t>(9 * y.size() / 10));
      for (size_t i = 0; i < composed.size(); ++i) {
        CAPTURE(threads);
        CAPTURE(i);
        CHECK(naive_fused[i].to_vector<float>() == composed[i].to_vector<float>());
        CHECK(violation(fast_fused[i].to_vector<float>(), composed[i].to_vector<float>(), 1e-4,
                        1e-4) <= 1.0);
      }
      // The masked gradient is exactly grad_out or 0, where the output is positive or not.
      CHECK(fast_fused[8].to_vector<float>() == composed[8].to_vector<float>());
    }
    FastScope scope(1, ops::CpuKernels::Fast);
    Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
    CHECK_THROWS_WITH_AS(ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true,
                                               Tensor::zeros({6, 5, 3, 10})),
                         doctest::Contains("residual"), Error);
    CHECK_THROWS_WITH_AS(ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, false, residual),
                         doctest::Contains("only fused together with the ReLU"), Error);
    ops::BatchNormOutput o = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5);
    CHECK_THROWS_WITH_AS(ops::batch_norm_backward(gy, x, gamma, o.save_mean, o.save_invstd,
                                                  Tensor(), /*want_masked=*/true),
                         doctest::Contains("needs relu_out"), Error);
  }

  TEST_CASE("copy_ between strided views: fast path bit-identical to the twin, every dtype") {
    Generator gen(13);
    const Tensor x = ops::randn({3, 4, 7, 9}, gen);
    const Tensor big = ops::randn({16, 32, 32, 32}, gen);
    auto run_all = [&] {
      std::vector<Tensor> outs;
      // The option-A shortcut: every second pixel into a channel window of a zero tensor.
      Tensor padded = Tensor::zeros({3, 8, 4, 5});
      Tensor window = padded.narrow(1, 2, 4);
      ops::copy_(window, x.slice(2, 0, 7, 2).slice(3, 0, 9, 2));
      outs.push_back(padded);
      // ... and back (its backward): a channel window into every second pixel.
      Tensor back = Tensor::zeros(x.shape());
      Tensor pixels = back.slice(2, 0, 7, 2).slice(3, 0, 9, 2);
      ops::copy_(pixels, padded.narrow(1, 2, 4));
      outs.push_back(back);
      outs.push_back(x.transpose(1, 3).contiguous());  // a stride-1 source read across
      Tensor into_transposed = Tensor::zeros({3, 9, 7, 4});
      Tensor t = into_transposed.transpose(1, 3);
      ops::copy_(t, x);
      outs.push_back(into_transposed);
      Tensor ints = Tensor::zeros({3, 4, 7, 9}, kInt64).transpose(0, 2);
      ops::copy_(ints, x.to(kInt64).transpose(0, 2));
      outs.push_back(ints.contiguous().to(kFloat32));
      outs.push_back(x.narrow(3, 1, 1).contiguous());  // a column: inner length 1
      // The shortcut at ResNet's size, both ways: 8192 rows of 16, 4 times the pool's grain, so
      // several chunks, each finding its first row by division and counting the rest.
      Tensor wide = Tensor::zeros({16, 64, 16, 16});
      Tensor wide_window = wide.narrow(1, 16, 32);
      ops::copy_(wide_window, big.slice(2, 0, 32, 2).slice(3, 0, 32, 2));
      outs.push_back(wide);
      Tensor big_back = Tensor::zeros(big.shape());
      Tensor big_pixels = big_back.slice(2, 0, 32, 2).slice(3, 0, 32, 2);
      ops::copy_(big_pixels, wide.narrow(1, 16, 32));
      outs.push_back(big_back);
      return outs;
    };
    std::vector<Tensor> naive, fast;
    {
      FastScope scope(1, ops::CpuKernels::Naive);
      naive = run_all();
    }
    for (const int threads : {1, 3}) {
      FastScope scope(threads, ops::CpuKernels::Fast);
      fast = run_all();
      REQUIRE(naive.size() == fast.size());
      for (size_t i = 0; i < naive.size(); ++i) {
        CAPTURE(threads);
        CAPTURE(i);
        CHECK(fast[i].shape() == naive[i].shape());
        CHECK(fast[i].to_vector<float>() == naive[i].to_vector<float>());
      }
    }
    const std::vector<float> shortcut = fast[0].to_vector<float>();
    CHECK(shortcut[2 * 20] == x.to_vector<float>()[0]);  // (0, 2, 0, 0) <- (0, 0, 0, 0)
    CHECK(shortcut[0] == 0.0f);                          // channel 0 is padding
  }

  TEST_CASE("max_pool2d_backward on the fast path refuses an argmax outside its plane") {
    FastScope scope(2, ops::CpuKernels::Fast);
    const Tensor grad = Tensor::ones({1, 1, 2, 2});
    const Tensor bad = Tensor::from_vector<int64_t>({0, 1, 16, 3}, {1, 1, 2, 2});
    CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(grad, bad, {1, 1, 4, 4}),
                         doctest::Contains("argmax index 16"), Error);
  }
}

}  // namespace echelon
