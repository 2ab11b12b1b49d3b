// The input gradient of strided convolutions by phases (cuda/kernels/conv_phases.cu): one
// stride-1 implicit GEMM per phase of the input pixels, its weights packed by one kernel and its
// store placing the phase's pixels in the full grad_in. Against the CPU twin (tensor/cpu/conv.cpp)
// on odd sizes (N=3, C=9, O=5, 13x11) over strides 2x2, 2x3, 3x3, 4x2 and 3x1, kernels 3x3, 1x1,
// 5x3 and 2x2, padding 0-2 (also above the kernel), and the phases without taps (KH < stride:
// 1x1 stride 2, 3x3 stride 4); every tile (16x256 and 32x128 with and without the gather table,
// 64x64, 128x128) under fp32, TF32 and bf16; phases on and off alike; what the heuristic and the
// tuner's candidate list choose (with the sliding-window kernel, which takes the 3-wide stride-2
// cases first, switched off: conv_window_gpu_test.cpp compares the two).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_phases.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>

#include "tests/support/parity.h"

using namespace echelon;

namespace {

struct PhaseCase {
  const char* name;
  Shape x, w;  // (N, C, H, W), (O, C, KH, KW)
  int64_t stride_h, stride_w, pad_h, pad_w;
};

const std::vector<PhaseCase>& phase_cases() {
  static const std::vector<PhaseCase> all = {
      {"3x3_s2_p1 (ResNet's downsampling)", {3, 9, 13, 11}, {5, 9, 3, 3}, 2, 2, 1, 1},
      {"3x3_s2x3_p1x0", {3, 9, 13, 11}, {5, 9, 3, 3}, 2, 3, 1, 0},
      {"3x3_s3_p2", {3, 9, 13, 11}, {5, 9, 3, 3}, 3, 3, 2, 2},
      {"3x3_s3_p0", {3, 9, 13, 11}, {5, 9, 3, 3}, 3, 3, 0, 0},
      // KH = 3 < 4: one row class of taps is empty, so a row of phases has no tap.
      {"3x3_s4x2_p2x1 (tapless phases)", {3, 9, 13, 11}, {5, 9, 3, 3}, 4, 2, 2, 1},
      {"1x1_s2_p0 (tapless phases)", {3, 9, 13, 11}, {5, 9, 1, 1}, 2, 2, 0, 0},
      {"1x1_s2x3_p2 (padding above the kernel)", {3, 9, 13, 11}, {5, 9, 1, 1}, 2, 3, 2, 2},
      {"5x3_s2x3_p2x1", {3, 9, 13, 11}, {5, 9, 5, 3}, 2, 3, 2, 1},
      {"2x2_s2_p0", {3, 9, 13, 11}, {5, 9, 2, 2}, 2, 2, 0, 0},
      {"2x2_s2_p2", {3, 9, 13, 11}, {5, 9, 2, 2}, 2, 2, 2, 2},
      {"3x3_s3x1_p1 (rows only)", {3, 9, 13, 11}, {5, 9, 3, 3}, 3, 1, 1, 1},
      // The heuristic's tiles: 16 channels (16x256), 24 (32x128), 72 (64x64).
      {"c16_3x3_s2_p1", {2, 16, 9, 9}, {8, 16, 3, 3}, 2, 2, 1, 1},
      {"c24_3x3_s2_p1", {2, 24, 10, 7}, {6, 24, 3, 3}, 2, 2, 1, 1},
      {"c72_3x3_s2_p1", {2, 72, 9, 10}, {8, 72, 3, 3}, 2, 2, 1, 1},
  };
  return all;
}

Conv2dGeometry geometry_of(const PhaseCase& c) {
  Conv2dGeometry g;
  g.kernel_h = c.w[2], g.kernel_w = c.w[3];
  g.stride_h = c.stride_h, g.stride_w = c.stride_w, g.pad_h = c.pad_h, g.pad_w = c.pad_w;
  return g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
}

// The case's operands on `device`, rounded as `round_as` rounds (the twin's inputs under TF32 /
// bf16: the kernels round the same values in their fragments).
struct Operands {
  Tensor w, gy;
};
Operands operands(const PhaseCase& c, Precision round_as, Device device) {
  const Conv2dGeometry g = geometry_of(c);
  const auto draw = [&](const Shape& shape, uint64_t seed) {
    return parity::rounded_as(parity::random_cpu(shape, seed), round_as).to(device);
  };
  return {draw(c.w, 2), draw({g.n, g.o, g.out_h, g.out_w}, 4)};
}

// The CPU twin's input gradient.
Tensor twin_grad_input(const PhaseCase& c, Precision round_as) {
  const Operands on = operands(c, round_as, Device::cpu());
  const Tensor x = Tensor::zeros(c.x, kFloat32, Device::cpu());  // the input gradient ignores x
  Conv2dGeometry window = geometry_of(c);
  return ops::conv2d_backward(on.gy, x, on.w, false, true, window, false).input;
}

// grad_in by cuda::run_conv with `config`, into a NaN-filled tensor.
Tensor run_grad_input(const PhaseCase& c, const cuda::ConvConfig& config) {
  const Operands on = operands(c, Precision::Fp32, Device::cuda(0));
  Tensor out = Tensor::full(c.x, std::nanf(""), kFloat32, Device::cuda(0));
  cuda::ConvCall call;
  call.pass = cuda::ConvPass::BackwardData, call.geometry = geometry_of(c);
  call.w = on.w.data<float>(), call.grad_out = on.gy.data<float>();
  call.out = out.data<float>(), call.stream = cuda::current_stream(0);
  cuda::run_conv(call, config);
  return out.cpu();
}

// The precision and the phase switch for a scope, the window kernel off; restores the defaults.
struct PhaseScope {
  explicit PhaseScope(Precision precision) : window_before(cuda::conv_window()) {
    ops::set_conv_impl(ops::ConvImpl::Ours);
    ops::set_float32_precision(precision);
    cuda::set_conv_window(false);
  }
  ~PhaseScope() {
    ops::set_float32_precision(Precision::Fp32);
    cuda::set_conv_dgrad_phases(true);
    cuda::set_conv_window(window_before);
  }
  bool window_before;
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
};

// Sums of up to 45 products of values in [-1, 1): conv_gpu_test's grad-input tolerance.
const parity::Tolerance kTolerance{1e-4, 1e-4};

}  // namespace

TEST_SUITE("conv_gpu") {
  TEST_CASE("phases: the strided input gradient matches the twin, phases on and off alike") {
    REQUIRE(cuda::conv_dgrad_phases());
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
      for (const PhaseCase& c : phase_cases()) {
        const std::string what = std::string(c.name) + " " + name(precision);
        const Tensor want = twin_grad_input(c, precision);
        PhaseScope scope(precision);
        const Conv2dGeometry g = geometry_of(c);
        const cuda::ConvConfig on = cuda::conv_heuristic(cuda::ConvPass::BackwardData, g);
        CHECK_MESSAGE(on.phases, what);
        const Tensor phased = run_grad_input(c, on);
        cuda::set_conv_dgrad_phases(false);
        const cuda::ConvConfig off = cuda::conv_heuristic(cuda::ConvPass::BackwardData, g);
        CHECK_MESSAGE(!off.phases, what);
        const Tensor single = run_grad_input(c, off);
        const parity::Comparison to_twin = parity::compare(phased, want, kTolerance);
        CHECK_MESSAGE(to_twin.ok, what, " phases: ", to_twin.summary());
        const parity::Comparison to_single = parity::compare(phased, single, kTolerance);
        CHECK_MESSAGE(to_single.ok, what, " phases vs single GEMM: ", to_single.summary());
      }
  }

  TEST_CASE("phases: every tile, with and without the gather table, matches the twin") {
    // The tuner's phased candidates (conv_candidates) on the cases with odd sizes and tapless
    // phases: each a whole call through run_conv, as the tuner times it.
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
      for (const PhaseCase& c : phase_cases()) {
        if (c.x[1] != 9) continue;  // the odd-size cases; the others reach their tiles above
        const Tensor want = twin_grad_input(c, precision);
        PhaseScope scope(precision);
        int phased = 0;
        for (const cuda::ConvConfig& config :
             cuda::conv_candidates(cuda::ConvPass::BackwardData, geometry_of(c))) {
          if (!config.phases) continue;
          ++phased;
          const parity::Comparison cmp =
              parity::compare(run_grad_input(c, config), want, kTolerance);
          CHECK_MESSAGE(cmp.ok, c.name, " ", name(precision), " ", cuda::to_string(config), ": ",
                        cmp.summary());
        }
        CHECK_MESSAGE(phased >= 4, c.name, " ", name(precision));  // every tile, some with table
      }
  }

  TEST_CASE("phases: taken for stride > 1 without dilation only; the switch turns them off") {
    PhaseScope window_off(Precision::Fp32);
    const auto phased = [](const Conv2dGeometry& g) {
      return cuda::conv_heuristic(cuda::ConvPass::BackwardData, g).phases;
    };
    const auto candidates_phased = [](const Conv2dGeometry& g) {
      int count = 0;
      for (const cuda::ConvConfig& c : cuda::conv_candidates(cuda::ConvPass::BackwardData, g))
        count += c.phases ? 1 : 0;
      return count;
    };
    Conv2dGeometry strided = geometry_of(phase_cases().front());
    CHECK(phased(strided));
    CHECK(candidates_phased(strided) > 0);
    CHECK(cuda::to_string(cuda::conv_heuristic(cuda::ConvPass::BackwardData, strided))
              .find(" phases") != std::string::npos);
    CHECK(!cuda::conv_heuristic(cuda::ConvPass::Forward, strided).phases);
    Conv2dGeometry dilated = strided;
    dilated.dilation_h = 2;
    CHECK(!phased(dilated));
    CHECK(candidates_phased(dilated) == 0);
    Conv2dGeometry unit = strided;
    unit.stride_h = unit.stride_w = 1;
    CHECK(!phased(unit));
    {
      PhaseScope scope(Precision::Fp32);
      cuda::set_conv_dgrad_phases(false);
      CHECK(!phased(strided));
      CHECK(candidates_phased(strided) == 0);
    }
    CHECK(phased(strided));
  }
}
