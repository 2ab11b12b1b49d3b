// The sliding-window convolution (cuda/kernels/conv_window.cu): forward (with and without bias,
// with the ReLU) and the input gradient (overwriting and adding into a sum), against the
// naive CPU twin (tensor/cpu/conv.h) and bit for bit against the implicit GEMM's FMA tiles, on
// the four nets' layer kinds (LeNet-5's 5x5 layers, ResNet's 16-, 32- and 64-channel 3x3 layers)
// and odd ones: a ragged last channel group and last pixel quad, rectangular 5x3 kernels, uneven
// padding, rows wider than a warp's pixels, more input channels than one staged chunk (in the
// emulation's plan, 10 a chunk there: 6 chunks forward, 7 for the input gradient), batch 1; and
// stride 2 both ways (ResNet's downsampling, odd sizes, 2x3 and 5x3 kernels, padding 0, 1 and 2,
// an input of one row: the input gradient's two row phases, one of them empty); 130 channels both
// ways (above the heuristic's 64: blocks along y).
// Under TF32 and bf16, unrounded inputs: the twin's values on rounded inputs. Also which
// convolutions it takes, and that the heuristic picks it (under every precision; not with the
// switch off).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/ops.h>

#include "tests/support/parity.h"
#include "tests/support/sim_kernels.h"

using namespace echelon;

namespace {

struct WindowCase {
  const char* name;
  Shape x, w;
  int64_t pad_h, pad_w;
  int64_t stride = 1;
};

const std::vector<WindowCase>& window_cases() {
  static const std::vector<WindowCase> all = {
      {"LeNet conv1 (1 -> 6, 5x5, pad 2)", {2, 1, 12, 10}, {6, 1, 5, 5}, 2, 2},
      {"LeNet conv2 (6 -> 16, 5x5)", {3, 6, 9, 7}, {16, 6, 5, 5}, 0, 0},
      {"ResNet 16 channels", {3, 16, 8, 8}, {16, 16, 3, 3}, 1, 1},
      {"ResNet 32 channels", {2, 32, 6, 6}, {32, 32, 3, 3}, 1, 1},
      {"ResNet 64 channels", {2, 64, 4, 4}, {64, 64, 3, 3}, 1, 1},
      {"17 filters, uneven padding, ragged quad", {2, 5, 7, 13}, {17, 5, 3, 3}, 1, 0},
      {"5x3 kernel", {2, 3, 9, 6}, {8, 3, 5, 3}, 2, 1},
      {"70-pixel rows, batch 1", {1, 2, 3, 70}, {4, 2, 3, 3}, 1, 1},
      // Staged rows of 33 and 35 float4s: wider than a warp, a lane stages two of a row.
      {"130-pixel rows", {2, 2, 3, 130}, {4, 2, 3, 3}, 1, 1},
      {"stride 2, 66-pixel output rows", {1, 3, 5, 131}, {8, 3, 3, 3}, 1, 1, 2},
      {"60 -> 64 channels: staged in chunks", {1, 60, 5, 40}, {64, 60, 3, 3}, 1, 1},
      {"3x3 without padding", {2, 4, 6, 9}, {40, 4, 3, 3}, 0, 0},
      {"ResNet downsampling 16 -> 32, stride 2", {3, 16, 8, 8}, {32, 16, 3, 3}, 1, 1, 2},
      {"stride 2, odd sizes, no padding", {2, 5, 9, 11}, {12, 5, 3, 3}, 0, 0, 2},
      {"stride 2, a 2x3 kernel, uneven padding", {2, 3, 7, 10}, {8, 3, 2, 3}, 0, 1, 2},
      {"stride 2, a 5x3 kernel, padding 2, 40 channels", {2, 40, 9, 8}, {6, 40, 5, 3}, 2, 2, 2},
      {"ResNet downsampling 32 -> 64, stride 2, batch 1", {1, 32, 6, 6}, {64, 32, 3, 3}, 1, 1, 2},
      {"stride 2, one input row", {3, 4, 1, 7}, {5, 4, 3, 3}, 1, 1, 2},
      // Above 64 channels (an autotuner candidate, not the heuristic's pick): 3 blocks along y.
      {"130 channels both ways", {2, 130, 6, 7}, {130, 130, 3, 3}, 1, 1},
  };
  return all;
}

Conv2dGeometry geometry_of(const WindowCase& c) {
  Conv2dGeometry g;
  g.kernel_h = c.w[2], g.kernel_w = c.w[3];
  g.pad_h = c.pad_h, g.pad_w = c.pad_w;
  g.stride_h = g.stride_w = c.stride;
  return g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
}

// The window kernel switched on or off for a scope, our convolution under fp32.
struct WindowScope {
  explicit WindowScope(bool on) : before(cuda::conv_window()) {
    ops::set_conv_impl(ops::ConvImpl::Ours);
    ops::set_float32_precision(Precision::Fp32);
    cuda::set_conv_window(on);
  }
  ~WindowScope() { cuda::set_conv_window(before); }
  bool before;
  WindowScope(const WindowScope&) = delete;
  WindowScope& operator=(const WindowScope&) = delete;
};

struct Operands {
  Conv2dGeometry a;
  std::vector<float> x, w, bias, gy, sum;  // sum: what an accumulating input gradient adds into
};

Operands operands_of(const WindowCase& c) {
  const Conv2dGeometry a = geometry_of(c);
  const auto draw = [](const Shape& shape, uint64_t seed) {
    return parity::random_cpu(shape, seed).to_vector<float>();
  };
  return {a,
          draw(c.x, 11),
          draw(c.w, 12),
          draw({a.o}, 13),
          draw({a.n, a.o, a.out_h, a.out_w}, 14),
          draw({a.n, a.c, a.h, a.w}, 15)};
}

Tensor on_device(const std::vector<float>& host) {
  return Tensor::from_vector(host, {static_cast<int64_t>(host.size())}).to(Device::cuda(0));
}

// One pass with `config` through cuda::run_conv. Forward: y, with the bias unless `no_bias`,
// ReLU'd with `relu`; grad input: overwriting, or with `accumulate` added into on.sum.
std::vector<float> run_pass(const Operands& on, cuda::ConvPass pass, const cuda::ConvConfig& config,
                            bool relu = false, bool no_bias = false, bool accumulate = false) {
  const Conv2dGeometry& a = on.a;
  const Tensor x = on_device(on.x), w = on_device(on.w), bias = on_device(on.bias);
  const Tensor gy = on_device(on.gy);
  const bool forward = pass == cuda::ConvPass::Forward;
  const int64_t count = forward ? a.n * a.o * a.out_h * a.out_w : a.n * a.c * a.h * a.w;
  Tensor out = accumulate ? on_device(on.sum)
                          : Tensor::full({count}, std::nanf(""), kFloat32, Device::cuda(0));
  cuda::ConvCall call;
  call.pass = pass, call.geometry = a;
  call.x = x.data<float>(), call.w = w.data<float>(), call.grad_out = gy.data<float>();
  call.bias = no_bias ? nullptr : bias.data<float>();
  call.relu = relu, call.accumulate = accumulate;
  call.out = out.data<float>(), call.stream = cuda::current_stream(0);
  cuda::run_conv(call, config);
  return out.to_vector<float>();
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  const Shape shape{static_cast<int64_t>(want.size())};
  const parity::Comparison cmp = parity::compare(Tensor::from_vector(got, shape),
                                                 Tensor::from_vector(want, shape), {1e-4, 1e-4});
  CHECK_MESSAGE(cmp.ok, what, ": ", cmp.summary());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_SUITE("conv_window_gpu") {
  TEST_CASE("forward and input gradient: the CPU twin's values, the implicit GEMM's bits") {
    const cuda::ConvConfig window{.window = true};
    for (const WindowCase& c : window_cases()) {
      const Operands on = operands_of(c);
      const Conv2dGeometry& a = on.a;
      REQUIRE_MESSAGE(cuda::conv_window_fits(cuda::ConvPass::Forward, a), std::string(c.name));
      REQUIRE_MESSAGE(cuda::conv_window_fits(cuda::ConvPass::BackwardData, a), std::string(c.name));
      WindowScope scope(false);
      // The unsplit GEMM's bits (split-K, which the emulation's heuristic takes for K >= 64,
      // adds the products in another order).
      cuda::ConvConfig gemm_fwd = cuda::conv_gemm_heuristic(cuda::ConvPass::Forward, a);
      cuda::ConvConfig gemm_bwd = cuda::conv_gemm_heuristic(cuda::ConvPass::BackwardData, a);
      gemm_fwd.groups = gemm_bwd.groups = 1;

      std::vector<float> y(static_cast<size_t>(a.n * a.o * a.out_h * a.out_w));
      cpu::conv2d_forward(a, on.x.data(), on.w.data(), on.bias.data(), y.data());
      const std::vector<float> got_y = run_pass(on, cuda::ConvPass::Forward, window);
      expect_near(got_y, y, std::string(c.name) + " forward");
      CHECK_MESSAGE(same_bits(got_y, run_pass(on, cuda::ConvPass::Forward, gemm_fwd)),
                    std::string(c.name));

      std::vector<float> relu_y = y;
      for (float& v : relu_y) v = v > 0.0f ? v : 0.0f;
      const std::vector<float> got_relu = run_pass(on, cuda::ConvPass::Forward, window, true);
      expect_near(got_relu, relu_y, std::string(c.name) + " forward + ReLU");
      CHECK_MESSAGE(same_bits(got_relu, run_pass(on, cuda::ConvPass::Forward, gemm_fwd, true)),
                    std::string(c.name));

      std::vector<float> plain(y.size());
      cpu::conv2d_forward<float>(a, on.x.data(), on.w.data(), nullptr, plain.data());
      const std::vector<float> got_plain =
          run_pass(on, cuda::ConvPass::Forward, window, false, /*no_bias=*/true);
      expect_near(got_plain, plain, std::string(c.name) + " forward without bias");
      CHECK_MESSAGE(
          same_bits(got_plain, run_pass(on, cuda::ConvPass::Forward, gemm_fwd, false, true)),
          std::string(c.name));

      std::vector<float> gx(on.sum.size());
      cpu::conv2d_backward_input(a, on.gy.data(), on.w.data(), gx.data());
      const std::vector<float> got_gx = run_pass(on, cuda::ConvPass::BackwardData, window);
      expect_near(got_gx, gx, std::string(c.name) + " grad input");
      CHECK_MESSAGE(same_bits(got_gx, run_pass(on, cuda::ConvPass::BackwardData, gemm_bwd)),
                    std::string(c.name));

      // Adding into the gradient sum: sum + value, one float add per element.
      std::vector<float> added = on.sum;
      for (size_t i = 0; i < added.size(); ++i) added[i] += got_gx[i];
      const std::vector<float> got_sum =
          run_pass(on, cuda::ConvPass::BackwardData, window, false, false, /*accumulate=*/true);
      CHECK_MESSAGE(same_bits(got_sum, added), std::string(c.name));
    }
  }

  TEST_CASE("under TF32 and bf16 it rounds both operands as it stages them") {
    const cuda::ConvConfig window{.window = true};
    for (const WindowCase& c : window_cases()) {
      const Operands on = operands_of(c);
      const Conv2dGeometry& a = on.a;
      for (const Precision precision : {Precision::Tf32, Precision::Bf16}) {
        const auto rounded = [&](const std::vector<float>& v) {
          const Shape shape{static_cast<int64_t>(v.size())};
          return parity::rounded_as(Tensor::from_vector(v, shape), precision).to_vector<float>();
        };
        const std::vector<float> x = rounded(on.x), w = rounded(on.w), gy = rounded(on.gy);
        std::vector<float> y(static_cast<size_t>(a.n * a.o * a.out_h * a.out_w)), exact(y.size());
        cpu::conv2d_forward(a, x.data(), w.data(), on.bias.data(), y.data());
        cpu::conv2d_forward(a, on.x.data(), on.w.data(), on.bias.data(), exact.data());
        std::vector<float> gx(on.sum.size());
        cpu::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
        WindowScope scope(true);
        ops::set_float32_precision(precision);
        const std::vector<float> got_y = run_pass(on, cuda::ConvPass::Forward, window);
        const std::vector<float> got_gx = run_pass(on, cuda::ConvPass::BackwardData, window);
        ops::set_float32_precision(Precision::Fp32);
        const std::string what = std::string(c.name) + " " + name(precision);
        expect_near(got_y, y, what + " forward");
        expect_near(got_gx, gx, what + " grad input");
        const Shape shape{static_cast<int64_t>(y.size())};
        CHECK_MESSAGE(!parity::compare(Tensor::from_vector(got_y, shape),
                                       Tensor::from_vector(exact, shape), {1e-6, 0.0})
                           .ok,
                      what);
      }
    }
  }

  TEST_CASE("which convolutions it takes, and the heuristic's pick") {
    for (const WindowCase& c : window_cases()) {
      const Conv2dGeometry a = geometry_of(c);
      // The heuristic's: at most 64 output channels of the pass (O forward, C backward).
      const bool forward = a.o <= 64, backward = a.c <= 64;
      WindowScope on(true);
      CHECK_MESSAGE(cuda::conv_heuristic(cuda::ConvPass::Forward, a).window == forward,
                    std::string(c.name));
      CHECK_MESSAGE(cuda::conv_heuristic(cuda::ConvPass::BackwardData, a).window == backward,
                    std::string(c.name));
      CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, a).window);
      const std::vector<cuda::ConvConfig> listed =
          cuda::conv_candidates(cuda::ConvPass::Forward, a);
      CHECK(std::count(listed.begin(), listed.end(), cuda::ConvConfig{.window = true}) == 1);
      {
        WindowScope off(false);
        CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::Forward, a).window);
        CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::BackwardData, a).window);
      }
      for (const Precision precision : {Precision::Tf32, Precision::Bf16}) {
        ops::set_float32_precision(precision);
        CHECK(cuda::conv_heuristic(cuda::ConvPass::Forward, a).window == forward);
        CHECK(cuda::conv_heuristic(cuda::ConvPass::BackwardData, a).window == backward);
        ops::set_float32_precision(Precision::Fp32);
      }
    }
    const auto geometry = [](Shape x, Shape w, int64_t stride, int64_t pad, int64_t dilation) {
      Conv2dGeometry g;
      g.kernel_h = w[2], g.kernel_w = w[3];
      g.stride_h = g.stride_w = stride, g.pad_h = g.pad_w = pad;
      g.dilation_h = g.dilation_w = dilation;
      return g.for_input(x[0], x[1], x[2], x[3], w[0]);
    };
    WindowScope on(true);
    const cuda::ConvPass fwd = cuda::ConvPass::Forward, bwd = cuda::ConvPass::BackwardData;
    // Stride 2 (ResNet's downsampling) 3-wide only, not stride 3; dilation, 7-wide and 1-wide
    // kernels, 513 output channels of the pass (512 fit, 65 the heuristic leaves to the GEMM).
    CHECK(cuda::conv_window_fits(fwd, geometry({2, 16, 8, 8}, {32, 16, 3, 3}, 2, 1, 1)));
    CHECK(cuda::conv_window_fits(bwd, geometry({2, 16, 8, 8}, {32, 16, 3, 3}, 2, 1, 1)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 16, 9, 9}, {32, 16, 5, 5}, 2, 2, 1)));
    CHECK_FALSE(cuda::conv_window_fits(bwd, geometry({2, 16, 9, 9}, {32, 16, 5, 5}, 2, 2, 1)));
    CHECK_FALSE(cuda::conv_window_fits(bwd, geometry({2, 16, 9, 9}, {32, 16, 3, 3}, 3, 1, 1)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 16, 9, 9}, {32, 16, 3, 3}, 3, 1, 1)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 16, 9, 9}, {16, 16, 3, 3}, 1, 2, 2)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 3, 16, 16}, {8, 3, 7, 7}, 1, 3, 1)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 16, 8, 8}, {16, 16, 1, 1}, 1, 0, 1)));
    CHECK(cuda::conv_window_fits(fwd, geometry({2, 16, 8, 8}, {512, 16, 3, 3}, 1, 1, 1)));
    CHECK_FALSE(cuda::conv_window_fits(fwd, geometry({2, 16, 8, 8}, {513, 16, 3, 3}, 1, 1, 1)));
    CHECK_FALSE(cuda::conv_window_preferred(fwd, geometry({2, 16, 8, 8}, {65, 16, 3, 3}, 1, 1, 1)));
    CHECK(cuda::conv_window_preferred(fwd, geometry({2, 16, 8, 8}, {64, 16, 3, 3}, 1, 1, 1)));
    // The input gradient counts the input channels; and padding past the kernel has none.
    CHECK(cuda::conv_window_fits(bwd, geometry({2, 16, 8, 8}, {65, 16, 3, 3}, 1, 1, 1)));
    CHECK(cuda::conv_window_fits(bwd, geometry({2, 65, 8, 8}, {16, 65, 3, 3}, 1, 1, 1)));
    CHECK_FALSE(cuda::conv_window_preferred(bwd, geometry({2, 65, 8, 8}, {16, 65, 3, 3}, 1, 1, 1)));
    CHECK_FALSE(cuda::conv_window_fits(bwd, geometry({2, 513, 4, 4}, {16, 513, 3, 3}, 1, 1, 1)));
    CHECK(cuda::conv_window_fits(fwd, geometry({2, 3, 6, 6}, {8, 3, 3, 3}, 1, 3, 1)));
    CHECK_FALSE(cuda::conv_window_fits(bwd, geometry({2, 3, 6, 6}, {8, 3, 3, 3}, 1, 3, 1)));
    CHECK_FALSE(cuda::conv_window_fits(cuda::ConvPass::BackwardWeight,
                                       geometry({2, 16, 8, 8}, {16, 16, 3, 3}, 1, 1, 1)));
    // Asked to run what it does not take: a clear error naming the convolution.
    Tensor x = Tensor::zeros({2, 16, 8, 8}, kFloat32, Device::cuda(0));
    Tensor w = Tensor::zeros({16, 16, 3, 3}, kFloat32, Device::cuda(0));
    Tensor y = Tensor::zeros({2, 16, 4, 4}, kFloat32, Device::cuda(0));
    CHECK_THROWS_WITH(cuda::conv2d_forward_window(geometry({2, 16, 8, 8}, {16, 16, 3, 3}, 3, 1, 1),
                                                  x.data<float>(), w.data<float>(), nullptr,
                                                  y.data<float>(), cuda::current_stream(0)),
                      doctest::Contains("stride 3x3"));
  }

#if ECHELON_CUDA_SIM
  TEST_CASE("LeNet-5's conv2 input gradient is one launch (the columns path took two)") {
    const WindowCase& c = window_cases()[1];
    const Operands on = operands_of(c);
    WindowScope on_scope(true);
    Tensor gy =
        Tensor::from_vector(on.gy, {on.a.n, on.a.o, on.a.out_h, on.a.out_w}).to(Device::cuda(0));
    Tensor w = Tensor::from_vector(on.w, c.w).to(Device::cuda(0));
    Tensor gx = Tensor::zeros(c.x, kFloat32, Device::cuda(0));
    const uint64_t launches = test::kernels_of([&] {
      cuda::conv2d_backward_input(on.a, gy.data<float>(), w.data<float>(), gx.data<float>(), 0,
                                  cuda::current_stream(0));
    });
    CHECK(launches == 1);
    WindowScope off(false);
    Tensor columns = Tensor::zeros(c.x, kFloat32, Device::cuda(0));
    CHECK(test::kernels_of([&] {
            cuda::conv2d_backward_input(on.a, gy.data<float>(), w.data<float>(),
                                        columns.data<float>(), 0, cuda::current_stream(0));
          }) >= 2);
    expect_near(gx.to_vector<float>(), columns.to_vector<float>(), "window vs columns");
  }
#endif
}
