// Our convolution's two algorithms (cuda::set_conv_algorithm: implicit GEMM, the default, and
// im2col + GEMM) against the CPU twin, every direction, under fp32, TF32 and bf16, on shapes that
// reach each tile (16x256 tiny for <= 16 rows, 32x128 narrow for <= 32, 64x64, 128x128) and the
// float4 operand loads (weights' rows, grad_out's planes), the split-K weight gradient, the
// columns fallback of the input gradient (< 8 input channels), stride,
// padding, dilation, rectangular kernels, batch 1, C = 1 and sizes that are no tile multiple;
// every register-staged tile's gather table (and its fallbacks), also against the plain gathers bit
// for bit; the direct weight gradient (cuda/kernels/conv_direct.cu) on every case it takes. Under
// TF32 (bf16) the reference is the fp32 twin on TF32- (bf16-) rounded inputs (as
// tests/gpu/tf32_gpu_test: the kernels' operands are the tensors' own values or padding zeros,
// rounded in the fragments, or for bf16 when staged in shared memory).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>

#include "tests/support/parity.h"
#include "tests/support/sim_kernels.h"

using namespace echelon;

namespace {

// Our convolution with one algorithm and precision for a scope; restores the defaults. The
// direct weight gradient (conv_direct.cu) is off unless asked for, and so is the window kernel
// (conv_window.cu, tested in conv_window_gpu_test.cpp), so that the implicit GEMM's tiles keep
// their cases; the direct kernel's own test case below turns it on.
struct ConvScope {
  ConvScope(cuda::ConvAlgorithm algorithm, Precision precision, bool direct = false)
      : direct_before(cuda::conv_wgrad_direct()), window_before(cuda::conv_window()) {
    ops::set_conv_impl(ops::ConvImpl::Ours);
    cuda::set_conv_algorithm(algorithm);
    ops::set_float32_precision(precision);
    cuda::set_conv_wgrad_direct(direct);
    cuda::set_conv_window(false);
  }
  ~ConvScope() {
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
    ops::set_float32_precision(Precision::Fp32);
    cuda::set_conv_wgrad_direct(direct_before);
    cuda::set_conv_window(window_before);
  }
  bool direct_before, window_before;
  ConvScope(const ConvScope&) = delete;
  ConvScope& operator=(const ConvScope&) = delete;
};

struct Case {
  const char* name;
  Shape x, w;
  Conv2dGeometry window;  // kernel from w
};

Conv2dGeometry window(int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                      int64_t dilation = 1) {
  Conv2dGeometry g;
  g.stride_h = stride_h, g.stride_w = stride_w, g.pad_h = pad_h, g.pad_w = pad_w;
  g.dilation_h = g.dilation_w = dilation;
  return g;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // Narrow tile, split-K over 3 groups in the emulation (K = 3*6*5 = 90: 12 k-slices).
      {"odd_s2_p1_d2", {3, 9, 11, 9}, {7, 9, 3, 3}, window(2, 2, 1, 1, 2)},
      // Fewer than 8 input channels: the input gradient takes the columns path.
      {"c5_s2_p1_d2", {3, 5, 11, 9}, {7, 5, 3, 3}, window(2, 2, 1, 1, 2)},
      {"batch1_c1_o6 (LeNet conv1)", {1, 1, 13, 10}, {6, 1, 5, 5}, window(1, 1, 2, 2)},
      {"o16_no_pad (LeNet conv2)", {2, 6, 9, 7}, {16, 6, 5, 5}, window(1, 1, 0, 0)},
      {"rect_5x3_s3x1", {3, 3, 19, 10}, {6, 3, 5, 3}, window(3, 1, 2, 0)},
      {"1x1_s2", {2, 9, 8, 8}, {12, 9, 1, 1}, window(2, 2, 0, 0)},
      // 64x64 tile: 33 output channels (forward, grad weight), 40 input channels (grad input).
      {"o33_same", {2, 17, 7, 9}, {33, 17, 3, 3}, window(1, 1, 1, 1)},
      {"c40_s2", {2, 40, 5, 6}, {8, 40, 3, 3}, window(2, 2, 1, 1)},
      // 128x128 tile for the fp32 forward: 130 rows, 288 columns (six tiles).
      {"o130_large", {2, 3, 12, 12}, {130, 3, 3, 3}, window(1, 1, 1, 1)},
      // float4 loads of the weights' rows (R = 144, 72) and of grad_out's planes (64, 36): the
      // 16x256 tiny tile in every direction (ResNet-20's first stage), and the narrow tile.
      {"c16_o16_vector (ResNet-20)", {2, 16, 8, 8}, {16, 16, 3, 3}, window(1, 1, 1, 1)},
      {"c8_o24_vector", {2, 8, 6, 6}, {24, 8, 3, 3}, window(1, 1, 1, 1)},
      // The gather table of the tiny, narrow and 64x64 tiles (conv_gemm.cu): C = 1, stride 2,
      // padding; 16 / 17 / 32 / 33 channels at the tiles' row boundaries; dilation, and stride 3
      // with dilation 3 (the grad input's table needs dilation % stride == 0; stride 2 without
      // dilation takes the plain gather); grad weight over several column tiles (R = 288,
      // 297: the table's n0 > 0); the 64x64 tile's grad input (40 and 48 input channels, the
      // second at stride 3 with dilation 3); K = 129*9, past the 1152 entries the table once
      // had; K = 513*9 past its 4608 and 7x7's 49 taps (forward and grad input fall back); odd
      // sizes throughout.
      {"table_c1_o16_s2_p2", {3, 1, 15, 13}, {16, 1, 5, 5}, window(2, 2, 2, 2)},
      {"table_c16_o17_d2", {2, 16, 9, 11}, {17, 16, 3, 3}, window(1, 1, 2, 2, 2)},
      {"table_c32_o32_s2", {2, 32, 9, 7}, {32, 32, 3, 3}, window(2, 2, 1, 1)},
      {"table_c33_o16_s1x2", {2, 33, 7, 5}, {16, 33, 3, 3}, window(1, 2, 1, 0)},
      {"table_c17_o6_s3_d3", {2, 17, 13, 12}, {6, 17, 3, 2}, window(3, 3, 2, 1, 3)},
      {"table_c40_o20", {2, 40, 7, 6}, {20, 40, 3, 3}, window(1, 1, 1, 1)},
      {"table_c48_o10_s3_d3", {2, 48, 13, 12}, {10, 48, 3, 2}, window(3, 3, 2, 1, 3)},
      {"table_k1161", {1, 129, 5, 4}, {8, 129, 3, 3}, window(1, 1, 1, 1)},
      {"table_k4617_fallback", {1, 513, 4, 3}, {8, 513, 3, 3}, window(1, 1, 1, 1)},
      {"table_7x7_fallback", {2, 9, 11, 10}, {12, 9, 7, 7}, window(2, 2, 3, 3)},
      // The plain gathers with dilation, where the table cannot go: grad input at stride 2 with
      // dilation 3 on the tiny tile, and on the 64x64 tile (40 input channels).
      {"plain_c9_s2_d3", {2, 9, 13, 11}, {8, 9, 3, 3}, window(2, 2, 2, 2, 3)},
      {"plain_c40_s2_d3", {1, 40, 12, 9}, {8, 40, 3, 3}, window(2, 2, 2, 1, 3)},
      // The 128x128 tensor-core tile (mma_tile.cuh) under TF32 and bf16 in every direction: 136
      // filters over 130 channels (VGG-16's deep layers, small; a 1x2 kernel keeps K, and the
      // emulated tensor cores' time, small): forward and grad input 2 x 2 tiles (N = 156,
      // K = 260 and 272), grad weight 2 x 3 (K = 156); the 128x128 FMA tile under fp32.
      {"c130_o136_large", {1, 130, 12, 12}, {136, 130, 1, 2}, window(1, 1, 0, 1)},
  };
  return all;
}

struct Results {
  Tensor y, grad_input, grad_weight, grad_bias;
  Tensor y_relu;  // conv2d(..., relu = true): every tile's store with the clamp (ops::conv2d)
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

Conv2dGeometry window_of(const Case& c) {
  Conv2dGeometry g = c.window;
  g.kernel_h = c.w[2], g.kernel_w = c.w[3];
  return g;
}

Conv2dGeometry full_geometry(const Case& c) {
  return window_of(c).for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
}

// A case's operands (the same draws for every device), rounded as `round_as` rounds.
struct Operands {
  Conv2dGeometry full;
  Tensor x, w, bias, gy;
};

Operands operands(const Case& c, Precision round_as, Device device) {
  const Conv2dGeometry full = full_geometry(c);
  const auto draw = [&](const Shape& shape, uint64_t seed) {
    return parity::rounded_as(parity::random_cpu(shape, seed), round_as).to(device);
  };
  return {full, draw(c.x, 1), draw(c.w, 2), parity::random_cpu({c.w[0]}, 3).to(device),
          draw({full.n, full.o, full.out_h, full.out_w}, 4)};
}

Results run(const Case& c, Device device, Precision round_as) {
  const Conv2dGeometry g = window_of(c);
  const Operands on = operands(c, round_as, device);
  const ops::Conv2dGrads grads = ops::conv2d_backward(on.gy, on.x, on.w, true, true, g);
  return {ops::conv2d(on.x, on.w, on.bias, g).cpu(), grads.input.cpu(), grads.weight.cpu(),
          grads.bias.cpu(), ops::conv2d(on.x, on.w, on.bias, g, /*relu=*/true).cpu()};
}

// One pass on device operands with `config` (cuda::run_conv), its output as floats; with
// grad_bias, a weight gradient's call also asks for the bias gradient (ConvCall::grad_bias).
std::vector<float> run_pass(const Operands& on, cuda::ConvPass pass, const cuda::ConvConfig& config,
                            std::vector<float>* grad_bias = nullptr) {
  const Conv2dGeometry& a = on.full;
  const Shape shape = pass == cuda::ConvPass::Forward ? Shape{a.n, a.o, a.out_h, a.out_w}
                      : pass == cuda::ConvPass::BackwardData
                          ? Shape{a.n, a.c, a.h, a.w}
                          : Shape{a.o, a.c, a.kernel_h, a.kernel_w};
  Tensor out = Tensor::full(shape, std::nanf(""), kFloat32, on.x.device());
  cuda::ConvCall call;
  call.pass = pass, call.geometry = a;
  call.x = on.x.data<float>(), call.w = on.w.data<float>(), call.grad_out = on.gy.data<float>();
  call.bias = on.bias.data<float>();
  call.out = out.data<float>(), call.stream = cuda::current_stream(on.x.device().index);
  Tensor bias = Tensor::full({a.o}, std::nanf(""), kFloat32, on.x.device());
  if (grad_bias) call.grad_bias = bias.data<float>();
  cuda::run_conv(call, config);
  if (grad_bias) *grad_bias = bias.to_vector<float>();
  return out.to_vector<float>();
}

void check_against_cpu(cuda::ConvAlgorithm algorithm, Precision precision) {
  for (const Case& c : cases()) {
    const Results want = run(c, Device::cpu(), precision);
    Results got;
    {
      ConvScope scope(algorithm, precision);
      got = run(c, Device::cuda(0), Precision::Fp32);
    }
    const std::string what =
        std::string(c.name) + " " + name(precision) +
        (algorithm == cuda::ConvAlgorithm::ImplicitGemm ? " implicit" : " im2col");
    // Sums of up to ~300 products of values in [-1, 1): a few fp32 ulps of the sum's terms.
    const parity::Tolerance tol{1e-4, 1e-4}, wide{5e-4, 1e-4};
    const auto expect = [&](const Tensor& a, const Tensor& b, parity::Tolerance t,
                            const char* direction) {
      const parity::Comparison cmp = parity::compare(a, b, t);
      CHECK_MESSAGE(cmp.ok, what, " ", direction, ": ", cmp.summary());
    };
    expect(got.y, want.y, tol, "forward");
    expect(got.y_relu, ops::relu(want.y), tol, "forward + ReLU");
    expect(got.grad_input, want.grad_input, tol, "grad input");
    expect(got.grad_weight, want.grad_weight, wide, "grad weight");
    // The bias gradient is a plain fp32 reduction of grad_out under either precision.
    const Tensor want_bias = precision != Precision::Fp32
                                 ? run(c, Device::cpu(), Precision::Fp32).grad_bias
                                 : want.grad_bias;
    expect(got.grad_bias, want_bias, wide, "grad bias");
  }
}

}  // namespace

TEST_SUITE("conv_gpu") {
  TEST_CASE("implicit GEMM, fp32: every direction matches the CPU twin") {
    check_against_cpu(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32);
  }
  TEST_CASE("implicit GEMM, TF32: every direction matches the twin on TF32-rounded inputs") {
    check_against_cpu(cuda::ConvAlgorithm::ImplicitGemm, Precision::Tf32);
  }
  TEST_CASE("implicit GEMM, bf16: every direction matches the twin on bf16-rounded inputs") {
    check_against_cpu(cuda::ConvAlgorithm::ImplicitGemm, Precision::Bf16);
  }
  TEST_CASE("im2col + GEMM, fp32, TF32 and bf16: every direction matches the CPU twin") {
    check_against_cpu(cuda::ConvAlgorithm::Im2colGemm, Precision::Fp32);
    check_against_cpu(cuda::ConvAlgorithm::Im2colGemm, Precision::Tf32);
    check_against_cpu(cuda::ConvAlgorithm::Im2colGemm, Precision::Bf16);
  }

  TEST_CASE("the gather table gives the plain gathers' results bit for bit") {
    // The same sums in the same order: every output of every case equal to the last bit, table
    // on (the default) and off, under each precision (the bf16 tiles have tables too), on every
    // register-staged tile: the 128x128 ones in every pass (o130_large's fp32 forward,
    // c130_o136_large's every pass), the weight gradient's column table included.
    REQUIRE(cuda::conv_gather_table());
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
      for (const Case& c : cases()) {
        ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, precision);
        const Results with = run(c, Device::cuda(0), Precision::Fp32);
        cuda::set_conv_gather_table(false);
        const Results without = run(c, Device::cuda(0), Precision::Fp32);
        cuda::set_conv_gather_table(true);
        const auto same = [&](const Tensor& a, const Tensor& b, const char* direction) {
          const std::vector<float> u = a.to_vector<float>(), v = b.to_vector<float>();
          CHECK_MESSAGE((u.size() == v.size() &&
                         std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0),
                        c.name, " ", name(precision), " ", direction);
        };
        same(with.y, without.y, "forward");
        same(with.y_relu, without.y_relu, "forward + ReLU");
        same(with.grad_input, without.grad_input, "grad input");
        same(with.grad_weight, without.grad_weight, "grad weight");
      }
  }

  TEST_CASE(
      "the gather tiles (4-byte cp.async gathers): the register-staged tile's bits, the twin") {
    // Every case on the TF32 128x128 tile in every pass (grad input also below 8 channels):
    // ConvConfig::async_gather at 2 and 4 stages (the gathered operands, and the weights where
    // R % 4 != 0, by 4-byte cp.async zero-filled in the padding and past the edges; the ring 1
    // or 3 slices ahead) equal to the register-staged tile bit for bit, and to the twin on
    // TF32-rounded inputs. The cases: odd sizes, padding, stride 2 and 3, dilation 2 and 3, 1x1,
    // 3x3, 5x5, 7x7, 5x3 and 1x2 kernels, C = 1, channel counts no multiple of 4.
    ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Tf32);
    for (const Case& c : cases()) {
      Conv2dGeometry g = c.window;
      g.kernel_h = c.w[2], g.kernel_w = c.w[3];
      const Conv2dGeometry full = g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
      const Results want = run(c, Device::cpu(), Precision::Tf32);
      const Tensor x = parity::random_cpu(c.x, 1).to(Device::cuda(0)),
                   w = parity::random_cpu(c.w, 2).to(Device::cuda(0)),
                   bias = parity::random_cpu({c.w[0]}, 3).to(Device::cuda(0)),
                   gy = parity::random_cpu({full.n, full.o, full.out_h, full.out_w}, 4)
                            .to(Device::cuda(0));
      for (const cuda::ConvPass pass : {cuda::ConvPass::Forward, cuda::ConvPass::BackwardData,
                                        cuda::ConvPass::BackwardWeight}) {
        const Tensor& expected = pass == cuda::ConvPass::Forward        ? want.y
                                 : pass == cuda::ConvPass::BackwardData ? want.grad_input
                                                                        : want.grad_weight;
        const auto run_with = [&](const cuda::ConvConfig& config) {
          Tensor out = Tensor::full(expected.shape(), std::nanf(""), kFloat32, Device::cuda(0));
          cuda::ConvCall call;
          call.pass = pass, call.geometry = full;
          call.x = x.data<float>(), call.w = w.data<float>(), call.grad_out = gy.data<float>();
          call.bias = bias.data<float>();
          call.out = out.data<float>(), call.stream = cuda::current_stream(0);
          cuda::run_conv(call, config);
          return out.to_vector<float>();
        };
        cuda::ConvConfig plain;
        plain.tile = cuda::ConvTile::Large;
        const std::vector<float> registers = run_with(plain);
        for (const int stages : {2, cuda::mma_deep_stages()}) {
          cuda::ConvConfig gather = plain;
          gather.async_gather = true, gather.stages = stages;
          const std::vector<float> got = run_with(gather);
          CHECK_MESSAGE(
              (got.size() == registers.size() &&
               std::memcmp(got.data(), registers.data(), got.size() * sizeof(float)) == 0),
              c.name, " ", cuda::name(pass), " ", cuda::to_string(gather));
          const parity::Comparison cmp =
              parity::compare(Tensor::from_vector(got, expected.shape()), expected, {5e-4, 1e-4});
          CHECK_MESSAGE(cmp.ok, std::string(c.name), " ", cuda::name(pass), " stages ", stages,
                        ": ", cmp.summary());
        }
      }
    }
  }

  TEST_CASE("the 128x128 tile's warp-tiled FMA core: the block-strided core's bits, the twin") {
    // 130 filters over 132 channels: every direction on the 128x128 fp32 tile (forward and grad
    // input: 130 / 132 rows x 132 columns, K = 1188 and 1170; grad weight 130 x 1188, K = 132),
    // both FMA cores (cuda::set_fma_warp_tiles) equal to the last bit, and the warp-tiled one
    // against the twin. o130_large's forward has R = 27, no float4 weights: the launcher keeps
    // the block-strided core there (warp_tiles_fit).
    REQUIRE(std::string(cases()[8].name) == "o130_large");
    const bool before = cuda::fma_warp_tiles();  // ECHELON_FMA_CORE=old may have cleared it
    for (const Case& c :
         {Case{"o130_c132_large", {1, 132, 12, 11}, {130, 132, 3, 3}, window(1, 1, 1, 1)},
          cases()[8]}) {
      ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32);
      cuda::set_fma_warp_tiles(true);
      const Results warp = run(c, Device::cuda(0), Precision::Fp32);
      cuda::set_fma_warp_tiles(false);
      const Results strided = run(c, Device::cuda(0), Precision::Fp32);
      cuda::set_fma_warp_tiles(before);
      const auto same = [&](const Tensor& a, const Tensor& b, const char* direction) {
        const std::vector<float> u = a.to_vector<float>(), v = b.to_vector<float>();
        CHECK_MESSAGE((u.size() == v.size() &&
                       std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0),
                      c.name, " ", direction);
      };
      same(warp.y, strided.y, "forward");
      same(warp.y_relu, strided.y_relu, "forward + ReLU");
      same(warp.grad_input, strided.grad_input, "grad input");
      same(warp.grad_weight, strided.grad_weight, "grad weight");
      const Results want = run(c, Device::cpu(), Precision::Fp32);
      const auto near = [&](const Tensor& got, const Tensor& expected, const char* direction) {
        const parity::Comparison cmp = parity::compare(got, expected, {2e-4, 1e-4});
        CHECK_MESSAGE(cmp.ok, c.name, " ", direction, ": ", cmp.summary());
      };
      near(warp.y, want.y, "forward");
      near(warp.grad_input, want.grad_input, "grad input");
      near(warp.grad_weight, want.grad_weight, "grad weight");
    }
  }

  TEST_CASE("the weight gradient's split-K knob: forced group counts, clamped, match the twin") {
    // C = 1, 16 filters 5x5 at stride 2 over 3 images of 15x13: K = 3*8*7 = 168, 21 k-slices,
    // so at most ceil(21 / 4) = 6 groups of >= 4 slices (fp32).
    const Case& c = cases()[11];
    REQUIRE(std::string(c.name) == "table_c1_o16_s2_p2");
    Conv2dGeometry g = c.window;
    g.kernel_h = c.w[2], g.kernel_w = c.w[3];
    const Conv2dGeometry full = g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
    const int64_t heuristic = cuda::conv_wgrad_groups(full);
    const Results want = run(c, Device::cpu(), Precision::Fp32);
    ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32);
    // Not a structured binding: clang 14 cannot capture one in CHECK_MESSAGE.
    for (const auto& ask :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 2}, {3, 3}, {6, 6}, {100, 6}}) {
      const int64_t asked = ask.first, expected = ask.second;
      cuda::set_conv_wgrad_split(0, asked);
      CHECK(cuda::conv_wgrad_groups(full) == expected);
      const Results got = run(c, Device::cuda(0), Precision::Fp32);
      const parity::Comparison cmp =
          parity::compare(got.grad_weight, want.grad_weight, {5e-4, 1e-4});
      CHECK_MESSAGE(cmp.ok, "groups ", expected, ": ", cmp.summary());
    }
    cuda::set_conv_wgrad_split(0, 0);
    CHECK(cuda::conv_wgrad_groups(full) == heuristic);
  }

  TEST_CASE("split-K forward and input gradient: every group count gives the twin's values") {
    // o33_same: the forward on the 64x64 tile (2 tiles, K = 17*9 = 153), the grad input on the
    // 32x128 one (1 tile, K = 33*9 = 297); fp32, TF32 and bf16; the bias and the ReLU applied in
    // the groups' sum, and the grad input added to a gradient sum. Asked-for counts are clamped to
    // groups of >= 4 k-slices; each count's result is bitwise repeatable.
    const Case& c = cases()[6];
    REQUIRE(std::string(c.name) == "o33_same");
    const Conv2dGeometry full = full_geometry(c);
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
      const Results want = run(c, Device::cpu(), precision);
      ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, precision);
      const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
      const Tensor sum = parity::random_cpu(want.grad_input.shape(), 5);
      // One pass with `config` through cuda::run_conv into a copy of `init` (accumulate: added
      // to it).
      const auto pass = [&](cuda::ConvPass which, const cuda::ConvConfig& config, bool relu,
                            const Tensor& init, bool accumulate = false) {
        Tensor out = init.to(Device::cuda(0));
        cuda::ConvCall call;
        call.pass = which, call.geometry = full, call.relu = relu, call.accumulate = accumulate;
        call.x = on.x.data<float>(), call.w = on.w.data<float>();
        call.grad_out = on.gy.data<float>(), call.bias = on.bias.data<float>();
        call.out = out.data<float>(), call.stream = cuda::current_stream(0);
        cuda::run_conv(call, config);
        return out.cpu();
      };
      const Tensor y_nan = Tensor::full(want.y.shape(), std::nanf(""));
      const Tensor gx_nan = Tensor::full(want.grad_input.shape(), std::nanf(""));
      const auto expect = [&](const Tensor& got, const Tensor& expected, const std::string& what) {
        const parity::Comparison cmp = parity::compare(got, expected, {1e-4, 1e-4});
        CHECK_MESSAGE(cmp.ok, name(precision), " ", what, ": ", cmp.summary());
      };
      for (const int64_t asked : {1, 2, 3, 100}) {
        cuda::ConvConfig fwd = cuda::conv_gemm_heuristic(cuda::ConvPass::Forward, full);
        cuda::ConvConfig bwd = cuda::conv_gemm_heuristic(cuda::ConvPass::BackwardData, full);
        fwd.groups = bwd.groups = asked;
        const std::string what = "groups " + std::to_string(asked);
        const Tensor y = pass(cuda::ConvPass::Forward, fwd, false, y_nan);
        expect(y, want.y, what + " forward");
        expect(pass(cuda::ConvPass::Forward, fwd, true, y_nan), ops::relu(want.y),
               what + " forward + ReLU");
        CHECK(same_bits(pass(cuda::ConvPass::Forward, fwd, false, y_nan), y));
        const Tensor gx = pass(cuda::ConvPass::BackwardData, bwd, false, gx_nan);
        expect(gx, want.grad_input, what + " grad input");
        // Accumulating: the finished sum added to the gradient sum, one add an element.
        CHECK(same_bits(pass(cuda::ConvPass::BackwardData, bwd, false, sum, true),
                        ops::add(sum, gx)));
      }
    }
    // In the emulation's terms (kFillBlocks 4, K >= 64) the heuristic splits both: 2 groups over
    // the forward's 2 tiles, 4 over the grad input's one (38 k-slices); a shallow forward (1x1_s2:
    // K = 9) does not split.
    CHECK(cuda::conv_gemm_heuristic(cuda::ConvPass::Forward, full).groups == 2);
    CHECK(cuda::conv_gemm_heuristic(cuda::ConvPass::BackwardData, full).groups == 4);
    CHECK(cuda::conv_gemm_heuristic(cuda::ConvPass::Forward, full_geometry(cases()[5])).groups ==
          1);
  }

  TEST_CASE("the 128x128 tensor-core tile: split-K weight gradient and the 64x64 switch") {
    // The weight gradient on the large tile with split-K forced (its k-slices, the groups' unit,
    // are 16 deep under both precisions: 3 groups of 4, 4 and 2 slices), then every direction
    // with the 64x64 tile forced (set_mma_tile(Small), ECHELON_MMA_TILE=64's switch).
    const Case& c = cases().back();
    REQUIRE(std::string(c.name) == "c130_o136_large");
    REQUIRE(cuda::mma_tile() == cuda::MmaTile::Auto);
    Conv2dGeometry g = c.window;
    g.kernel_h = c.w[2], g.kernel_w = c.w[3];
    const Conv2dGeometry full = g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
    for (const Precision precision : {Precision::Tf32, Precision::Bf16}) {
      const Results want = run(c, Device::cpu(), precision);
      ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, precision);
      const auto check = [&](const Tensor& got, const Tensor& expected, const char* what) {
        const parity::Comparison cmp = parity::compare(got, expected, {5e-4, 1e-4});
        CHECK_MESSAGE(cmp.ok, name(precision), " ", what, ": ", cmp.summary());
      };
      cuda::set_conv_wgrad_split(0, 3);
      CHECK(cuda::conv_wgrad_groups(full) == 3);
      const Tensor x =
          parity::rounded_as(parity::random_cpu(c.x, 1), precision).to(Device::cuda(0));
      const Tensor w =
          parity::rounded_as(parity::random_cpu(c.w, 2), precision).to(Device::cuda(0));
      const Tensor gy =
          parity::rounded_as(parity::random_cpu({full.n, full.o, full.out_h, full.out_w}, 4),
                             precision)
              .to(Device::cuda(0));
      check(ops::conv2d_backward(gy, x, w, false, false, g).weight.cpu(), want.grad_weight,
            "split grad weight");
      cuda::set_conv_wgrad_split(0, 0);
      cuda::set_mma_tile(cuda::MmaTile::Small);
      const Results small = run(c, Device::cuda(0), Precision::Fp32);
      cuda::set_mma_tile(cuda::MmaTile::Auto);
      check(small.y, want.y, "64x64 forward");
      check(small.grad_input, want.grad_input, "64x64 grad input");
      check(small.grad_weight, want.grad_weight, "64x64 grad weight");
    }
  }

  TEST_CASE("implicit GEMM is the default and the split-K weight gradient is bitwise repeatable") {
    CHECK(cuda::conv_algorithm() == cuda::ConvAlgorithm::ImplicitGemm);
    // 3 images of 9x11x9, 7 filters: the weight gradient splits K = 3*6*5 over several groups
    // (all 12 k-slices in the emulation, a GPU's fill target on a device), summed in order.
    const Case& c = cases()[0];
    ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32);
    const Results first = run(c, Device::cuda(0), Precision::Fp32);
    for (int i = 0; i < 2; ++i) {
      const Results again = run(c, Device::cuda(0), Precision::Fp32);
      const std::vector<float> a = first.grad_weight.to_vector<float>();
      const std::vector<float> b = again.grad_weight.to_vector<float>();
      REQUIRE(a.size() == b.size());
      CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
      CHECK(again.grad_input.to_vector<float>() == first.grad_input.to_vector<float>());
    }
  }

  TEST_CASE("the direct weight gradient: taken where it fits; any block count equals the twin") {
    // conv_direct.cu takes the weight gradient of 19 cases: kernel widths 3, 5 and 7, 5x3,
    // stride 2 and 3x1, padding, dilation 2 and 3, batch 1, C = 1, O = 6 to 130 (o33_same: 255
    // work items, one block's worth; table_c40_o20, table_c32_o32_s2 and table_k1161: 360, 384
    // and 387, two item groups along y). The heuristic picks it there, and not with the switch
    // off. With 1 block (no partials), a quarter of the heuristic's blocks, the heuristic's and
    // one per chunk, under fp32, TF32 and bf16, its gradient matches the twin on rounded inputs,
    // and a second run gives the same bits. Asked for the bias gradient too (fp32, one item group:
    // 16 of them), it sums it in the same launch, to the twin's; the weights' bits stay.
    int taken = 0, with_bias = 0;
    for (const Case& c : cases()) {
      const Conv2dGeometry full = full_geometry(c);
      if (!cuda::wgrad_direct_fits(full)) continue;
      ++taken;
      const int64_t items = (full.o + 7) / 8 * full.c * full.kernel_h;
      CHECK_MESSAGE(cuda::wgrad_direct_sums_bias(full) == (items <= 256), c.name);
      with_bias += cuda::wgrad_direct_sums_bias(full) ? 1 : 0;
      for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
        const Results twin = run(c, Device::cpu(), precision);
        const Tensor& want = twin.grad_weight;
        ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, precision, /*direct=*/true);
        const cuda::ConvConfig heuristic =
            cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, full);
        CHECK_MESSAGE(heuristic.direct, c.name);
        const Operands on = operands(c, precision, Device::cuda(0));
        const int64_t most = cuda::wgrad_direct_most_groups(full);
        for (const int64_t groups :
             {int64_t{1}, std::max<int64_t>(heuristic.groups / 4, 1), heuristic.groups, most}) {
          const cuda::ConvConfig config{.groups = groups, .direct = true};
          const std::vector<float> got = run_pass(on, cuda::ConvPass::BackwardWeight, config);
          const std::vector<float> again = run_pass(on, cuda::ConvPass::BackwardWeight, config);
          CHECK_MESSAGE(got == again, c.name, " ", name(precision), " ", cuda::to_string(config));
          const parity::Comparison cmp =
              parity::compare(Tensor::from_vector(got, want.shape()), want, {5e-4, 1e-4});
          CHECK_MESSAGE(cmp.ok, c.name, " ", name(precision), " ", cuda::to_string(config), ": ",
                        cmp.summary());
          // The bias: the rounding test below; fp32 with one item group.
          if (precision != Precision::Fp32 || !cuda::wgrad_direct_sums_bias(full)) continue;
          std::vector<float> bias;
          const std::vector<float> with_bias =
              run_pass(on, cuda::ConvPass::BackwardWeight, config, &bias);
          CHECK_MESSAGE(with_bias == got, c.name, " ", cuda::to_string(config));
          const parity::Comparison bias_cmp = parity::compare(
              Tensor::from_vector(bias, twin.grad_bias.shape()), twin.grad_bias, {5e-4, 1e-4});
          CHECK_MESSAGE(bias_cmp.ok, c.name, " ", cuda::to_string(config),
                        " bias: ", bias_cmp.summary());
        }
      }
      ConvScope off(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32, /*direct=*/false);
      CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, full).direct);
    }
    CHECK(taken == 19);
    CHECK(with_bias == 16);
  }

  TEST_CASE("the direct weight gradient rounds its operands under TF32 and bf16") {
    // Unrounded inputs: the kernel's result is the twin's on rounded inputs, not the fp32 one.
    const Case& c = cases()[9];
    REQUIRE(std::string(c.name) == "c16_o16_vector (ResNet-20)");
    const Tensor exact = run(c, Device::cpu(), Precision::Fp32).grad_weight;
    for (const Precision precision : {Precision::Tf32, Precision::Bf16}) {
      const Tensor want = run(c, Device::cpu(), precision).grad_weight;
      ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, precision, /*direct=*/true);
      const Operands raw = operands(c, Precision::Fp32, Device::cuda(0));
      const cuda::ConvConfig direct{.groups = 2, .direct = true};
      const Tensor got =
          Tensor::from_vector(run_pass(raw, cuda::ConvPass::BackwardWeight, direct), want.shape());
      const parity::Comparison rounded = parity::compare(got, want, {5e-4, 1e-4});
      CHECK_MESSAGE(rounded.ok, name(precision), ": ", rounded.summary());
      CHECK_MESSAGE(!parity::compare(got, exact, {1e-6, 0.0}).ok, name(precision));
      // The bias gradient is summed unrounded, the fp32 twin's: the direct kernel's staged band is
      // rounded, so conv.cu's bias kernels take it.
      CHECK_FALSE(cuda::wgrad_direct_sums_bias(raw.full));
      std::vector<float> bias;
      run_pass(raw, cuda::ConvPass::BackwardWeight, direct, &bias);
      const Tensor exact_bias = run(c, Device::cpu(), Precision::Fp32).grad_bias;
      const parity::Comparison bias_cmp =
          parity::compare(Tensor::from_vector(bias, exact_bias.shape()), exact_bias, {1e-5, 1e-6});
      CHECK_MESSAGE(bias_cmp.ok, name(precision), " bias: ", bias_cmp.summary());
    }
  }

  TEST_CASE("the direct weight gradient's x band: neighbouring work items on different banks") {
    // The model of the reduction's x loads (wgrad_direct_x_load_wavefronts): dense, up to 6
    // lanes of ResNet-20's layers shared a bank; padded, the 3x3 layers of 32 and 64 channels
    // and the stride-2 one of 32 are conflict-free (the first layer, 8 lanes an item, stays
    // dense). Values: bench/RESULTS.md, session 45 (-s prints them).
    struct Layer {
      const char* name;
      int64_t c, size, o, stride;
      double most;  // padded wavefronts at most; 0: left dense
    };
    const Layer layers[] = {{"3->16", 3, 32, 16, 1, 0.0},      {"16->16", 16, 32, 16, 1, 2.0},
                            {"16->32 s2", 16, 32, 32, 2, 1.5}, {"32->32", 32, 16, 32, 1, 1.0},
                            {"32->64 s2", 32, 16, 64, 2, 1.0}, {"64->64", 64, 8, 64, 1, 1.0}};
    for (const Layer& l : layers) {
      Conv2dGeometry window;
      window.kernel_h = window.kernel_w = 3, window.pad_h = window.pad_w = 1;
      window.stride_h = window.stride_w = l.stride;
      const Conv2dGeometry a = window.for_input(128, l.c, l.size, l.size, l.o);
      REQUIRE_MESSAGE(cuda::wgrad_direct_fits(a), l.name);
      const double padded = cuda::wgrad_direct_x_load_wavefronts(a);
      const double dense = cuda::wgrad_direct_x_load_wavefronts(a, /*padded=*/false);
      MESSAGE(std::string(l.name), ": x load wavefronts ", dense, " dense, ", padded, " padded");
      if (l.most == 0.0) {
        CHECK_MESSAGE(padded == dense, l.name);
      } else {
        CHECK_MESSAGE(padded <= l.most, l.name, ": ", padded);
        CHECK_MESSAGE(padded < dense, l.name, ": ", padded, " >= ", dense);
      }
    }
  }

  TEST_CASE("the direct weight gradient brings the bias gradient: LeNet-5's layers in 2 kernels") {
    // ops::conv2d_backward of a layer with a bias and no input gradient: the direct kernel and
    // the blocks' sum (the bias in both; it was 2 more), the twin's values. Other paths and the
    // switch off take conv2d_backward_bias after the weight gradient, to the same values; so
    // does TF32, whose staged band is rounded.
    for (const size_t index : {size_t{2}, size_t{3}}) {  // LeNet-5's conv1 and conv2
      const Case& c = cases()[index];
      const Conv2dGeometry g = window_of(c), full = full_geometry(c);
      const Results want = run(c, Device::cpu(), Precision::Fp32);
      const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
      for (const bool direct : {true, false}) {
        ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32, direct);
        CHECK(cuda::conv2d_backward_weight_sums_bias(full) == direct);
        {
          ConvScope tf32(cuda::ConvAlgorithm::ImplicitGemm, Precision::Tf32, direct);
          CHECK_FALSE(cuda::conv2d_backward_weight_sums_bias(full));
        }
        ops::Conv2dGrads got;
        [[maybe_unused]] const auto backward = [&] {
          got = ops::conv2d_backward(on.gy, on.x, on.w, true, false, g);
        };
#if ECHELON_CUDA_SIM
        const uint64_t kernels = test::kernels_of(backward);
        CHECK_MESSAGE(direct ? kernels == 2 : kernels >= 3, c.name, " ", kernels);
#else
        backward();
#endif
        const parity::Comparison weight =
            parity::compare(got.weight.cpu(), want.grad_weight, {5e-4, 1e-4});
        const parity::Comparison bias =
            parity::compare(got.bias.cpu(), want.grad_bias, {5e-4, 1e-4});
        CHECK_MESSAGE(weight.ok, c.name, " ", direct, ": ", weight.summary());
        CHECK_MESSAGE(bias.ok, c.name, " ", direct, ": ", bias.summary());
      }
    }
  }

  TEST_CASE("the implicit GEMM's 32-bit indices: operands of 2^31 elements take the columns path") {
    Conv2dGeometry vgg;  // VGG-16's largest layer at batch 128 and 224x224: 411M input elements
    vgg.kernel_h = vgg.kernel_w = 3;
    vgg.pad_h = vgg.pad_w = 1;
    CHECK(cuda::conv_gemm_fits(vgg.for_input(128, 64, 224, 224, 64)));
    CHECK_FALSE(cuda::conv_gemm_fits(vgg.for_input(1024, 64, 224, 224, 64)));        // x, y: 3.3G
    CHECK_FALSE(cuda::conv_gemm_fits(vgg.for_input(1, 1, 8, 8, int64_t{1} << 31)));  // y and w
    Conv2dGeometry wide;  // only the weight is large: 2^16 x 2^16 1x1 filters
    CHECK_FALSE(cuda::conv_gemm_fits(wide.for_input(1, int64_t{1} << 16, 1, 1, int64_t{1} << 16)));
  }

  TEST_CASE("a batch of zero images: forward is empty, the weight gradient is zeros") {
    const Tensor x = Tensor::zeros({0, 3, 7, 7}, kFloat32, Device::cuda(0));
    const Tensor w = parity::random_cpu({6, 3, 3, 3}, 5).to(Device::cuda(0));
    const Tensor gy = Tensor::zeros({0, 6, 5, 5}, kFloat32, Device::cuda(0));
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 3;
    ConvScope scope(cuda::ConvAlgorithm::ImplicitGemm, Precision::Fp32);
    CHECK(ops::conv2d(x, w, Tensor(), g).numel() == 0);
    const std::vector<float> grad_w =
        ops::conv2d_backward(gy, x, w, false, true, g).weight.cpu().to_vector<float>();
    REQUIRE(grad_w.size() == 6 * 3 * 3 * 3);
    for (const float v : grad_w) CHECK(v == 0.0f);
  }
}
