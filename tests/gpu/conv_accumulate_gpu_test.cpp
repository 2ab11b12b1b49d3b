// The input gradient added into a sum by the convolution itself (cuda::ConvCall::accumulate;
// ops::conv2d_backward's input_sum on CUDA, the autograd engine's gradient sum at a ResNet
// block's input): every configuration the tuner may pick (each tile with and without the gather
// table, the TF32 128x128 tile's gather staging, the phases of a strided input gradient with and
// without tapless phases, the columns path) under fp32, TF32 and bf16 equals the sum plus the
// overwriting call's result bit for bit (one float add in the store, as axpy_(sum, grad, 1));
// at the ops level, with and without conv2d_relu's mask and on both algorithms, the CPU's
// result and no kernel more than without the sum; the autotuner times on scratch, so the sum is
// added to once; cuDNN's beta = 1 within a stated tolerance where it is built.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <echelon/cuda/check.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>

#include "tests/support/float_bits.h"
#include "tests/support/parity.h"
#include "tests/support/setting_scope.h"
#include "tests/support/sim_kernels.h"

using namespace echelon;

namespace {

struct AccCase {
  const char* name;
  Shape x, w;  // (N, C, H, W), (O, C, KH, KW)
  int64_t stride, pad;
};

Conv2dGeometry window_of(const AccCase& c) {
  Conv2dGeometry g;
  g.kernel_h = c.w[2], g.kernel_w = c.w[3];
  g.stride_h = g.stride_w = c.stride, g.pad_h = g.pad_w = c.pad;
  return g;
}

Conv2dGeometry geometry_of(const AccCase& c) {
  return window_of(c).for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
}

// Operands on `device` (the same draws everywhere), rounded as `round_as` rounds; `sum` is the
// gradient sum the input gradient is added to.
struct Operands {
  Tensor x, w, gy, sum;
};
Operands operands(const AccCase& c, Precision round_as, Device device) {
  const Conv2dGeometry g = geometry_of(c);
  const auto draw = [&](const Shape& shape, uint64_t seed) {
    return parity::rounded_as(parity::random_cpu(shape, seed), round_as).to(device);
  };
  return {draw(c.x, 1), draw(c.w, 2), draw({g.n, g.o, g.out_h, g.out_w}, 3),
          parity::random_cpu(c.x, 4).to(device)};
}

// grad_in by cuda::run_conv with `config`: overwriting a NaN-filled tensor, or accumulating into
// a copy of on.sum.
Tensor run_grad_input(const AccCase& c, const Operands& on, const cuda::ConvConfig& config,
                      bool accumulate) {
  Tensor out =
      accumulate ? on.sum.clone() : Tensor::full(c.x, std::nanf(""), kFloat32, on.w.device());
  cuda::ConvCall call;
  call.pass = cuda::ConvPass::BackwardData, call.geometry = geometry_of(c);
  call.w = on.w.data<float>(), call.grad_out = on.gy.data<float>();
  call.out = out.data<float>(), call.accumulate = accumulate;
  call.stream = cuda::current_stream(0);
  cuda::run_conv(call, config);
  return out.cpu();
}

// sum + grad, one float add per element: what axpy_(sum, grad, 1) stored.
std::vector<float> plus(const Tensor& sum, const Tensor& grad) {
  std::vector<float> out = sum.cpu().to_vector<float>();
  const std::vector<float> g = grad.cpu().to_vector<float>();
  REQUIRE(out.size() == g.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] += g[i];
  return out;
}

// The first element whose bits differ, or -1.
int64_t first_difference(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (test::bits_of(got[i]) != test::bits_of(want[i])) return static_cast<int64_t>(i);
  return -1;
}

struct ConvScope {  // our convolution under `precision` for a scope; restores the defaults
  explicit ConvScope(Precision precision) {
    ops::set_conv_impl(ops::ConvImpl::Ours);
    ops::set_float32_precision(precision);
  }
  ~ConvScope() {
    ops::set_float32_precision(Precision::Fp32);
    ops::set_conv_impl(ops::ConvImpl::Ours);
  }
  ConvScope(const ConvScope&) = delete;
  ConvScope& operator=(const ConvScope&) = delete;
};

// The grad-input GEMM's sum of up to ~400 products of values in [-1, 1), plus the sum:
// conv_gpu_test's grad-input tolerance.
const parity::Tolerance kTolerance{1e-4, 1e-4};

// Each path of cuda::run_conv's grad input: the candidates of the first three list every tile
// (the gather table on and off), the phases and the columns path; the last takes the columns path
// by the heuristic (fewer than 8 input channels).
const std::vector<AccCase>& config_cases() {
  static const std::vector<AccCase> all = {
      {"c9_3x3_s1", {2, 9, 7, 6}, {5, 9, 3, 3}, 1, 1},
      {"c9_3x3_s2 (phases)", {2, 9, 9, 7}, {5, 9, 3, 3}, 2, 1},
      {"c9_1x1_s2 (tapless phases)", {2, 9, 8, 7}, {6, 9, 1, 1}, 2, 0},
      {"c3_3x3_s1 (columns)", {2, 3, 7, 6}, {5, 3, 3, 3}, 1, 1},
  };
  return all;
}

// The heuristic's tiles of the ops-level cases: 16 input channels (16x256), 24 (32x128), 40 at
// stride 2 (phases, 64x64), 72 (64x64), 130 (128x128), 5 (columns).
const std::vector<AccCase>& ops_cases() {
  static const std::vector<AccCase> all = {
      {"c16_o16 (ResNet-20)", {2, 16, 8, 8}, {16, 16, 3, 3}, 1, 1},
      {"c24_o8", {2, 24, 6, 7}, {8, 24, 3, 3}, 1, 1},
      {"c40_o8_s2 (phases)", {2, 40, 7, 6}, {8, 40, 3, 3}, 2, 1},
      {"c72_o6", {1, 72, 5, 6}, {6, 72, 3, 3}, 1, 1},
      {"c130_o136_1x1 (128x128)", {1, 130, 12, 12}, {136, 130, 1, 1}, 1, 0},
      {"c5_o7 (columns)", {2, 5, 7, 6}, {7, 5, 3, 3}, 1, 1},
  };
  return all;
}

// conv2d_relu's saved output for a case's operands (undefined without `relu`).
Tensor relu_out_of(const AccCase& c, const Operands& on, bool relu) {
  return relu ? ops::relu(ops::conv2d(on.x, on.w, Tensor(), window_of(c))) : Tensor();
}

// ops::conv2d_backward of a case (bias, weight and input gradients), into `sum` when defined,
// through conv2d_relu's backward when relu_out is defined.
ops::Conv2dGrads backward_of(const AccCase& c, const Operands& on, const Tensor& sum,
                             const Tensor& relu_out) {
  return ops::conv2d_backward(on.gy, on.x, on.w, true, true, window_of(c), true, sum, relu_out);
}

}  // namespace

TEST_SUITE("conv_gpu") {
  TEST_CASE("accumulate: every grad-input config adds into the sum bit for bit") {
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
      for (const AccCase& c : config_cases()) {
        const Operands on = operands(c, precision, Device::cuda(0));
        ConvScope scope(precision);
        const Conv2dGeometry g = geometry_of(c);
        std::vector<cuda::ConvConfig> configs = {
            cuda::conv_heuristic(cuda::ConvPass::BackwardData, g)};
        for (const cuda::ConvConfig& config :
             cuda::conv_candidates(cuda::ConvPass::BackwardData, g))
          if (!(config == configs.front())) configs.push_back(config);
        int phased = 0, columns = 0;
        for (const cuda::ConvConfig& config : configs) {
          phased += config.phases ? 1 : 0;
          columns += config.im2col ? 1 : 0;
          const std::vector<float> want = plus(on.sum, run_grad_input(c, on, config, false));
          const std::vector<float> got = run_grad_input(c, on, config, true).to_vector<float>();
          const int64_t at = first_difference(got, want);
          CHECK_MESSAGE(at < 0, std::string(c.name), " ", name(precision), " ",
                        cuda::to_string(config), ": element ", at, " is ", at < 0 ? 0.0f : got[at],
                        ", sum + grad ", at < 0 ? 0.0f : want[at]);
        }
        CHECK_MESSAGE(columns == 1, std::string(c.name));
        CHECK_MESSAGE((phased > 0) == (c.stride > 1), std::string(c.name));
        // The four tiles, the gather table on two, and the columns path.
        CHECK_MESSAGE(configs.size() >= (c.x[1] >= 8 ? 7u : 1u), std::string(c.name));
      }
  }

  TEST_CASE("accumulate: ops::conv2d_backward's input_sum on CUDA equals the CPU's") {
    // Both algorithms, with and without conv2d_relu's mask: the input gradient lands in the sum
    // (the same storage), bit for bit the sum plus the overwriting call's gradient; the weight
    // and bias gradients are the overwriting call's, bit for bit.
    for (const cuda::ConvAlgorithm algorithm :
         {cuda::ConvAlgorithm::ImplicitGemm, cuda::ConvAlgorithm::Im2colGemm})
      for (const AccCase& c : ops_cases())
        for (const bool relu : {false, true}) {
          const std::string what = std::string(c.name) +
                                   (algorithm == cuda::ConvAlgorithm::Im2colGemm ? " im2col" : "") +
                                   (relu ? " relu" : "");
          const Operands host = operands(c, Precision::Fp32, Device::cpu());
          const ops::Conv2dGrads want =
              backward_of(c, host, host.sum.clone(), relu_out_of(c, host, relu));
          ConvScope scope(Precision::Fp32);
          const test::SettingScope<cuda::ConvAlgorithm> algo(cuda::conv_algorithm,
                                                             cuda::set_conv_algorithm, algorithm);
          const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
          const Tensor sum = on.sum.clone(), relu_out = relu_out_of(c, on, relu);
          const ops::Conv2dGrads got = backward_of(c, on, sum, relu_out);
          const ops::Conv2dGrads plain = backward_of(c, on, Tensor(), relu_out);
          CHECK_MESSAGE(got.input.data<float>() == sum.data<float>(), what);
          const parity::Comparison cmp = parity::compare(got.input.cpu(), want.input, kTolerance);
          CHECK_MESSAGE(cmp.ok, what, ": ", cmp.summary());
          CHECK_MESSAGE(
              first_difference(got.input.cpu().to_vector<float>(), plus(on.sum, plain.input)) < 0,
              what);
          CHECK_MESSAGE(first_difference(got.weight.cpu().to_vector<float>(),
                                         plain.weight.cpu().to_vector<float>()) < 0,
                        what);
          CHECK_MESSAGE(first_difference(got.bias.cpu().to_vector<float>(),
                                         plain.bias.cpu().to_vector<float>()) < 0,
                        what);
        }
  }

  TEST_CASE("accumulate: the autotuner times on scratch; the sum is added to once") {
    const AccCase& c = config_cases()[1];  // phases, the single GEMM and the columns path
    const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
    ConvScope scope(Precision::Fp32);
    const test::SettingScope<bool> tune(cuda::conv_autotune, cuda::set_conv_autotune, true);
    for (const bool fake_timer : {true, false}) {
      CAPTURE(fake_timer);
      cuda::clear_conv_tune_cache();
      const Tensor sum = on.sum.clone();
      int timed = 0, on_sum = 0;
      if (fake_timer)  // nothing is launched while timing: what each candidate's call looks like
        cuda::set_conv_tune_timer([&](const cuda::ConvCall& call, const cuda::ConvConfig&) {
          ++timed;
          on_sum += call.out == sum.data<float>() || call.accumulate ? 1 : 0;
          return 1.0 + timed;  // the heuristic, timed first, wins
        });
      // A miss: tuned, then the pick accumulates; the overwriting call then hits the same pick.
      ops::conv2d_backward(on.gy, on.x, on.w, false, true, window_of(c), false, sum);
      const ops::Conv2dGrads plain =
          ops::conv2d_backward(on.gy, on.x, on.w, false, true, window_of(c), false);
      cuda::set_conv_tune_timer({});
      REQUIRE(cuda::conv_tune_picks().size() == 1);
      CHECK(first_difference(sum.cpu().to_vector<float>(), plus(on.sum, plain.input)) < 0);
      if (fake_timer) {
        CHECK(timed > 3);
        CHECK(on_sum == 0);
      }
    }
    cuda::clear_conv_tune_cache();
  }

#if ECHELON_CUDA_SIM
  TEST_CASE("accumulate: conv2d_backward with input_sum launches no kernel more (no axpy)") {
    // Each path's input gradient: the single GEMM, the phases (with a tapless phase, whose
    // overwriting call zeroes grad_in by a memset, not a kernel), the columns path.
    for (const AccCase& c : config_cases()) {
      const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
      ConvScope scope(Precision::Fp32);
      for (const bool relu : {false, true}) {
        const Tensor sum = on.sum.clone(), relu_out = relu_out_of(c, on, relu);
        backward_of(c, on, sum, relu_out);  // first calls: any one-time work (none expected)
        const uint64_t without = test::kernels_of([&] { backward_of(c, on, Tensor(), relu_out); });
        const uint64_t with = test::kernels_of([&] { backward_of(c, on, sum, relu_out); });
        CHECK_MESSAGE(with == without, std::string(c.name), relu ? " relu" : "", ": ", with,
                      " kernels with the sum, ", without, " without");
      }
    }
  }
#endif

#if ECHELON_WITH_CUDNN
  TEST_CASE("accumulate: cuDNN's beta = 1 adds into the sum, also under the benchmark policy") {
    // cuDNN blends alpha * gradient + beta * sum inside its kernel: not promised to be one float
    // add, so within a tolerance of the sum plus the overwriting call's gradient (same plan, same
    // algorithm). The benchmark policy times on a scratch gradient: the sum is added to once.
    const parity::Tolerance blend{1e-6, 1e-6};
    for (const bool benchmark : {false, true})
      for (const AccCase& c : ops_cases()) {
        const std::string what = std::string(c.name) + (benchmark ? " benchmark" : "");
        const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
        const test::SettingScope<bool> tune(cuda::conv_autotune, cuda::set_conv_autotune,
                                            benchmark);
        ConvScope scope(Precision::Fp32);
        ops::set_conv_impl(ops::ConvImpl::Cudnn);
        const ops::Conv2dGrads got = backward_of(c, on, on.sum.clone(), Tensor());
        const ops::Conv2dGrads plain = backward_of(c, on, Tensor(), Tensor());
        const Tensor want = Tensor::from_vector<float>(plus(on.sum, plain.input), c.x);
        const parity::Comparison cmp = parity::compare(got.input.cpu(), want, blend);
        CHECK_MESSAGE(cmp.ok, what, ": ", cmp.summary());
        const Operands host = operands(c, Precision::Fp32, Device::cpu());
        const ops::Conv2dGrads cpu = backward_of(c, host, host.sum.clone(), Tensor());
        const parity::Comparison to_cpu = parity::compare(got.input.cpu(), cpu.input, kTolerance);
        CHECK_MESSAGE(to_cpu.ok, what, " vs the CPU: ", to_cpu.summary());
      }
  }
#endif
}
