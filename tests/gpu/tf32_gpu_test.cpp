// Precision::Tf32 on CUDA (--precision tf32): our tensor-core SGEMM against its CPU twin
// cpu::gemm_tf32 in every mode the launchers have (both transposes, strided batches, the fused
// row bias, batch-reduce), the rounding itself (K = 1 products isolate it), cuBLAS's TF32 math,
// ops::matmul under ops::set_float32_precision, and conv2d forward and backward. The checks
// shared with bf16_gpu_test.cpp are in reduced_precision_gemm.h. In the emulation build the WMMA
// fragments come from cuda/sim/include/mma.h; on a GPU from the tensor cores.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <echelon/kernels/tf32.h>

#include "tests/gpu/reduced_precision_gemm.h"

using namespace echelon;
using namespace echelon::reduced_precision;

TEST_SUITE("tf32_gpu") {
  TEST_CASE("round_to_tf32: nearest, ties away from zero, specials kept") {
    CHECK(round_to_tf32(1.0f) == 1.0f);
    CHECK(round_to_tf32(1.0f + std::ldexp(1.0f, -12)) == 1.0f);  // below half an ulp (2^-10)
    CHECK(round_to_tf32(1.0f + std::ldexp(1.0f, -11)) == 1.0f + std::ldexp(1.0f, -10));  // tie
    CHECK(round_to_tf32(-1.0f - std::ldexp(1.0f, -11)) == -1.0f - std::ldexp(1.0f, -10));
    CHECK(round_to_tf32(1.0f + 3 * std::ldexp(1.0f, -12)) == 1.0f + std::ldexp(1.0f, -10));
    CHECK(round_to_tf32(from_bits(0x7f7fffffu)) == INFINITY);  // FLT_MAX rounds up past the top
    CHECK(std::isnan(round_to_tf32(NAN)));
    CHECK(round_to_tf32(-INFINITY) == -INFINITY);
    CHECK(round_to_tf32(from_bits(0x00001000u)) == from_bits(0x00002000u));  // a subnormal tie
    CHECK(round_to_tf32(from_bits(0x00000fffu)) == 0.0f);
  }

  TEST_CASE("K = 1 products show the device's rounding: equal to round_to_tf32 bit for bit") {
    std::vector<float> values = {1.0f + std::ldexp(1.0f, -11),
                                 -1.0f - std::ldexp(1.0f, -11),
                                 1.0f + std::ldexp(1.0f, -12),
                                 3.14159265f,
                                 -2.71828183f,
                                 1e30f,
                                 -7.5e-20f};  // no subnormals: tensor cores may flush them
    check_k1_rounding(Precision::Tf32, values, round_to_tf32);
  }

  TEST_CASE("our tensor-core SGEMM equals cpu::gemm_tf32: transposes, alpha, beta, odd sizes") {
    // k-slices of 8 with a tail of 5. Against fp32 products the error is TF32's (~1e-3).
    check_gemm_transposes(Precision::Tf32, cpu::gemm_tf32, kSameRounding, 0.05, "TF32");
  }

  TEST_CASE("the 128x128 tensor-core tile at M, N >= 128 equals the twin") {
    // k-slices of 16 (two MMA k-steps): every transpose, tails in m, n and k, batches, bias,
    // batch-reduce.
    check_large_tile(Precision::Tf32, cpu::gemm_tf32, kSameRounding, 0.2, "TF32");  // K = 45
  }

  TEST_CASE("NaN and infinity operands stay so through the 128x128 tile's rounding when staged") {
    // The staging adds half a TF32 ulp to an operand's bits (gemm_tile.cuh, tf32_for_mma) and
    // leaves non-finite values alone: the NaN 0x7fffffff plus that would carry into the sign bit
    // (-0 to the tensor cores). A's row 3 holds that NaN, B's column 7 a +inf; every other
    // operand is positive and finite. The twin: C's row 3 NaN, column 7 +inf.
    const int64_t M = 130, N = 131, K = 20;
    Tensor a = parity::random_cpu({M, K}, 1, 1.0), b = parity::random_cpu({K, N}, 2, 1.0);
    for (Tensor* t : {&a, &b})
      for (int64_t i = 0; i < t->numel(); ++i)
        t->data<float>()[i] = std::fabs(t->data<float>()[i]) + 0.25f;
    a.data<float>()[3 * K + 5] = from_bits(0x7fffffffu);
    b.data<float>()[11 * N + 7] = INFINITY;
    const Tensor c0 = parity::random_cpu({M, N}, 3, 1.0);
    Tensor expected = c0.clone();
    cpu::gemm_tf32(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
                   expected.data<float>(), N);
    const Tensor got = device_gemm(Precision::Tf32, false, false, M, N, K, 1.0f, a, b, 0.0f, c0);
    int wrong = 0;
    for (int64_t e = 0; e < M * N; ++e) {
      const float g = got.data<float>()[e], x = expected.data<float>()[e];
      REQUIRE(std::isnan(x) == (e / N == 3));
      REQUIRE(std::isinf(x) == (e / N != 3 && e % N == 7));
      const bool same = !std::isfinite(x)
                            ? std::isnan(g) == std::isnan(x) && (std::isnan(x) || g == x)
                            : std::fabs(g - x) <= 1e-4 * std::fabs(x);
      if (!same && ++wrong <= 5) MESSAGE("element ", e, ": ", g, ", want ", x);
    }
    CHECK(wrong == 0);
  }

  TEST_CASE("the 4-stage ring (dynamic shared memory) equals the twin, K below and above it") {
    REQUIRE(cuda::mma_stages() == 2);  // the default: ECHELON_MMA_STAGES unset
    CHECK_THROWS(cuda::set_mma_stages(3));
    struct StagesScope {
      StagesScope() { cuda::set_mma_stages(cuda::mma_deep_stages()); }
      ~StagesScope() { cuda::set_mma_stages(2); }
    } deep;
    REQUIRE(cuda::mma_stages() == 4);
    // K = 16: one whole slice; 45: 3 slices of 16 (fewer than the 4 stages: empty cp.async groups
    // in the prologue) with a tail of 13; 150: 10 slices, the ring wraps twice, a tail of 6.
    // Every transpose with tight and 16-byte rows: cp.async for transposed A and plain B.
    for (const int64_t K : {16, 45, 150}) {
      CAPTURE(K);
      check_gemm_transposes(Precision::Tf32, cpu::gemm_tf32, kSameRounding, K < 100 ? 0.2 : 0.5,
                            "TF32", 130, 131, K);
    }
    // Batches, bias, batch-reduce (groups of 2 batches: the ring runs on across a batch).
    check_batched_modes(Precision::Tf32, cpu::gemm_tf32, 129, 131, 45);
  }

  TEST_CASE("k-contiguous operands by cp.async into [m][k] rows (async-K) equal the twin") {
    REQUIRE_FALSE(cuda::mma_async_k());  // the default: ECHELON_MMA_ASYNC_K unset
    struct AsyncKScope {
      AsyncKScope() { cuda::set_mma_async_k(true); }
      ~AsyncKScope() {
        cuda::set_mma_async_k(false);
        cuda::set_mma_stages(2);
      }
    } async_k;
    for (const int stages : {2, cuda::mma_deep_stages()}) {
      CAPTURE(stages);
      cuda::set_mma_stages(stages);
      // 16-byte rows (padded): AsyncK for plain A and transposed B, Async for the others; tight
      // rows of odd K: register staging in the same kernel. K = 16: one slice; 45: 3 slices (fewer
      // than 4 stages) with a tail of 13 (the last copy of a row zero-fills 12 bytes); 150: the
      // ring wraps, a tail of 6.
      for (const int64_t K : {16, 45, 150}) {
        CAPTURE(K);
        check_gemm_transposes(Precision::Tf32, cpu::gemm_tf32, kSameRounding, K < 100 ? 0.2 : 0.5,
                              "TF32", 130, 131, K);
      }
      // Batches (A and B k-contiguous: AsyncK both), bias, batch-reduce across batches; M, N
      // not multiples of 128: rows past the edge zero-filled.
      check_batched_modes(Precision::Tf32, cpu::gemm_tf32, 129, 131, 44);
    }
  }

  TEST_CASE("strided batches, the fused row bias and batch-reduce under TF32") {
    check_batched_modes(Precision::Tf32, cpu::gemm_tf32);
  }

  TEST_CASE("cuBLAS with TF32 math agrees with cpu::gemm_tf32 to TF32 accuracy") {
    // TF32's bound: 2^-10 relative per product, over K products of |a b| <= 4.
    const int64_t K = 24;
    check_cublas(Precision::Tf32, cpu::gemm_tf32, 40, 30, K, K * 4 * 1e-3);
  }

  TEST_CASE("ops::matmul on CUDA follows the TF32 twin while the precision is set") {
    // ops::matmul on CUDA is our GEMM: under TF32 it equals the twin to summation order.
    const Tensor a = parity::random_cpu({19, 53}, 10, 2.0),
                 b = parity::random_cpu({53, 71}, 11, 2.0);
    Tensor expected = Tensor::zeros({19, 71});
    cpu::gemm_tf32(false, false, 19, 71, 53, 1.0f, a.data<float>(), 53, b.data<float>(), 71, 0.0f,
                   expected.data<float>(), 71);
    const Tensor got = matmul_under(Precision::Tf32, a.to(Device::cuda(0)), b.to(Device::cuda(0)));
    const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
    CHECK_MESSAGE(cmp.ok, cmp.summary());
  }

  TEST_CASE("conv2d forward and backward under TF32 equal the CPU's on TF32-rounded inputs") {
    // Every path of our convolution is a GEMM whose inputs are the tensors themselves (im2col only
    // copies and zero-pads), so under TF32 it is the fp32 convolution of the rounded tensors.
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 3;
    window.stride_h = window.stride_w = 2;
    window.pad_h = window.pad_w = 1;
    const Tensor x = parity::random_cpu({3, 5, 11, 9}, 12, 2.0),
                 w = parity::random_cpu({7, 5, 3, 3}, 13, 2.0);
    const Tensor bias = parity::random_cpu({7}, 14, 2.0),
                 g = parity::random_cpu({3, 7, 6, 5}, 15, 2.0);
    const Tensor y_cpu = ops::conv2d(parity::rounded_as(x, Precision::Tf32),
                                     parity::rounded_as(w, Precision::Tf32), bias, window);
    const ops::Conv2dGrads grads_cpu = ops::conv2d_backward(
        parity::rounded_as(g, Precision::Tf32), parity::rounded_as(x, Precision::Tf32),
        parity::rounded_as(w, Precision::Tf32), true, true, window);
    Tensor y;
    ops::Conv2dGrads grads;
    {
      PrecisionScope tf32(Precision::Tf32);
      const Tensor xc = x.to(Device::cuda(0)), wc = w.to(Device::cuda(0));
      y = ops::conv2d(xc, wc, bias.to(Device::cuda(0)), window).cpu();
      grads = ops::conv2d_backward(g.to(Device::cuda(0)), xc, wc, true, true, window);
    }
    CHECK_MESSAGE(parity::compare(y, y_cpu, kSameRounding).ok, "forward");
    CHECK_MESSAGE(parity::compare(grads.input.cpu(), grads_cpu.input, kSameRounding).ok,
                  "backward data");
    CHECK_MESSAGE(parity::compare(grads.weight.cpu(), grads_cpu.weight, kSameRounding).ok,
                  "backward weight");
  }
}
