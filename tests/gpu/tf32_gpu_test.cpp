// Precision::Tf32 on CUDA (--precision tf32): our tensor-core SGEMM against its CPU twin
// cpu::gemm_tf32 in every mode the launchers have (both transposes, strided batches, the fused
// row bias, batch-reduce), the rounding itself (K = 1 products isolate it), cuBLAS's TF32 math,
// ops::matmul under ops::set_float32_precision, and conv2d forward and backward. In the emulation
// build the WMMA fragments come from cuda/sim/include/mma.h; on a GPU from the tensor cores.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/kernels/tf32.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>

#include "tests/support/parity.h"

using namespace echelon;

namespace {

Tensor random_cpu(const Shape& shape, uint64_t seed) {
  return parity::make_inputs({{shape, kFloat32, -2.0, 2.0, parity::Layout::Contiguous, {}}}, seed,
                             Device::cpu())[0];
}

// Sets the process-wide precision for one test and restores fp32 after it.
struct Tf32Scope {
  Tf32Scope() { ops::set_float32_precision(Precision::Tf32); }
  ~Tf32Scope() { ops::set_float32_precision(Precision::Fp32); }
  Tf32Scope(const Tf32Scope&) = delete;
  Tf32Scope& operator=(const Tf32Scope&) = delete;
};

float from_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// x with every element rounded to TF32 (CPU tensors).
Tensor tf32_rounded(const Tensor& x) {
  std::vector<float> values = x.to_vector<float>();
  for (float& v : values) v = round_to_tf32(v);
  return Tensor::from_vector(values, x.shape());
}

// Only the summation order separates the kernel (fp32, k in order) from the twin (double): a few
// fp32 ulps of sums of |a b| <= 4 over K <= 45 terms.
constexpr parity::Tolerance kSameRounding{1e-4, 1e-5};

}  // namespace

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
    // op(A) (M, 1) holds the values to round, B (1, 1) is 1, so C = tf32(a) * 1 exactly.
    std::vector<float> values = {1.0f + std::ldexp(1.0f, -11),
                                 -1.0f - std::ldexp(1.0f, -11),
                                 1.0f + std::ldexp(1.0f, -12),
                                 3.14159265f,
                                 -2.71828183f,
                                 1e30f,
                                 -7.5e-20f};  // no subnormals: tensor cores may flush them
    uint32_t state = 12345;
    for (int i = 0; i < 250; ++i) {  // 257 values in all: more than four 64-row tiles
      state = state * 1664525u + 1013904223u;
      values.push_back(from_bits((state & 0x807fffffu) | 0x3f000000u));  // +-[0.5, 1), any mantissa
    }
    const auto m = static_cast<int64_t>(values.size());
    const Tensor a = Tensor::from_vector(values, {m, 1}).to(Device::cuda(0));
    const Tensor one = Tensor::from_vector(std::vector<float>{1.0f}, {1, 1}).to(Device::cuda(0));
    Tensor c = Tensor::full({m, 1}, NAN, kFloat32, Device::cuda(0));
    {
      Tf32Scope tf32;
      cuda::gemm(false, false, m, 1, 1, 1.0f, a.data<float>(), 1, one.data<float>(), 1, 0.0f,
                 c.data<float>(), 1, cuda::current_stream(0));
    }
    const std::vector<float> got = c.cpu().to_vector<float>();
    int mismatches = 0;
    for (int64_t i = 0; i < m; ++i)
      if (got[i] != round_to_tf32(values[i])) {
        if (++mismatches <= 5)
          MESSAGE("value ", i, ": ", values[i], " -> ", got[i], ", expected ",
                  round_to_tf32(values[i]));
      }
    CHECK(mismatches == 0);
  }

  TEST_CASE("our tensor-core SGEMM equals cpu::gemm_tf32: transposes, alpha, beta, odd sizes") {
    const int64_t M = 70, N = 45, K = 37;  // two 64-row tiles, k-slices of 8 with a tail of 5
    for (const bool trans_a : {false, true})
      for (const bool trans_b : {false, true}) {
        const Tensor a = random_cpu(trans_a ? Shape{K, M} : Shape{M, K}, 1);
        const Tensor b = random_cpu(trans_b ? Shape{N, K} : Shape{K, N}, 2);
        const Tensor c0 = random_cpu({M, N}, 3);
        Tensor expected = c0.clone();
        const int64_t lda = trans_a ? M : K;
        const int64_t ldb = trans_b ? K : N;
        cpu::gemm_tf32(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(), ldb,
                       -0.5f, expected.data<float>(), N);
        Tensor fp32 = c0.clone();
        cpu::gemm<float>(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(),
                         ldb, -0.5f, fp32.data<float>(), N);
        const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
        Tensor c = c0.to(Device::cuda(0));
        {
          Tf32Scope tf32;
          cuda::gemm(trans_a, trans_b, M, N, K, 1.5f, a_gpu.data<float>(), lda, b_gpu.data<float>(),
                     ldb, -0.5f, c.data<float>(), N, cuda::current_stream(0));
        }
        const Tensor got = c.cpu();
        const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
        CHECK_MESSAGE(cmp.ok, "trans_a=", trans_a, " trans_b=", trans_b, ": ", cmp.summary());
        // The rounding is really there: against fp32 products the error is TF32's (~1e-3), far
        // above the summation-order differences of the check above.
        const parity::Comparison vs_fp32 = parity::compare(got, fp32, kSameRounding);
        CHECK_MESSAGE(!vs_fp32.ok, "TF32 result equals the fp32 one: ", vs_fp32.summary());
        CHECK_MESSAGE(vs_fp32.max_abs_error < 0.05, vs_fp32.summary());
      }
  }

  TEST_CASE("strided batches, the fused row bias and batch-reduce under TF32") {
    const int64_t M = 33, N = 67, K = 20, batch = 5;
    const Tensor a = random_cpu({batch, M, K}, 4), b = random_cpu({batch, N, K}, 5);
    const Tensor bias = random_cpu({M}, 6), c0 = random_cpu({batch, M, N}, 7);
    const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
    const Tensor bias_gpu = bias.to(Device::cuda(0));
    Tensor batched = c0.to(Device::cuda(0));
    Tensor biased = Tensor::full({batch, M, N}, NAN, kFloat32, Device::cuda(0));
    const int64_t per_group = 2, groups = 3;
    Tensor reduced = c0.narrow(0, 0, groups).contiguous().to(Device::cuda(0));
    {
      Tf32Scope tf32;
      const cudaStream_t stream = cuda::current_stream(0);
      cuda::gemm_strided_batched(false, true, M, N, K, 1.0f, a_gpu.data<float>(), K, M * K,
                                 b_gpu.data<float>(), K, N * K, 2.0f, batched.data<float>(), N,
                                 M * N, batch, stream);
      cuda::gemm_strided_batched_row_bias(false, true, M, N, K, a_gpu.data<float>(), K, M * K,
                                          b_gpu.data<float>(), K, N * K, bias_gpu.data<float>(),
                                          biased.data<float>(), N, M * N, batch, stream);
      cuda::gemm_batch_reduce(false, true, M, N, K, 1.0f, a_gpu.data<float>(), K, M * K,
                              b_gpu.data<float>(), K, N * K, 0.5f, reduced.data<float>(), N, M * N,
                              batch, per_group, stream);
    }
    const Tensor got_batched = batched.cpu(), got_biased = biased.cpu(),
                 got_reduced = reduced.cpu();
    for (int64_t i = 0; i < batch; ++i) {
      Tensor product = Tensor::zeros({M, N});
      cpu::gemm_tf32(false, true, M, N, K, 1.0f, a.data<float>() + i * M * K, K,
                     b.data<float>() + i * N * K, K, 0.0f, product.data<float>(), N);
      const Tensor want_batched = ops::add(product, ops::mul(c0.select(0, i), 2.0));
      const Tensor want_biased = ops::add(product, bias.reshape({M, 1}));
      CHECK_MESSAGE(parity::compare(got_batched.select(0, i), want_batched, kSameRounding).ok,
                    "batch ", i);
      CHECK_MESSAGE(parity::compare(got_biased.select(0, i), want_biased, kSameRounding).ok,
                    "row bias, batch ", i);
    }
    for (int64_t g = 0; g < groups; ++g) {
      Tensor want = ops::mul(c0.select(0, g), 0.5);
      for (int64_t i = g * per_group; i < std::min(batch, (g + 1) * per_group); ++i) {
        Tensor product = Tensor::zeros({M, N});
        cpu::gemm_tf32(false, true, M, N, K, 1.0f, a.data<float>() + i * M * K, K,
                       b.data<float>() + i * N * K, K, 0.0f, product.data<float>(), N);
        want = ops::add(want, product);
      }
      CHECK_MESSAGE(parity::compare(got_reduced.select(0, g), want, kSameRounding).ok, "group ", g);
    }
  }

  TEST_CASE("cuBLAS with TF32 math agrees with cpu::gemm_tf32 to TF32 accuracy") {
    // cuBLAS may round its inputs differently from cvt.rna (or keep fp32 for a small problem), so
    // the bound is TF32's: 2^-10 relative per product, over K products of |a b| <= 4.
    const int64_t M = 40, N = 30, K = 24;
    const Tensor a = random_cpu({M, K}, 8), b = random_cpu({K, N}, 9);
    Tensor expected = Tensor::zeros({M, N});
    cpu::gemm_tf32(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
                   expected.data<float>(), N);
    const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
    Tensor c = Tensor::full({M, N}, NAN, kFloat32, Device::cuda(0));
    {
      Tf32Scope tf32;
      cuda::gemm_cublas(false, false, M, N, K, 1.0f, a_gpu.data<float>(), K, b_gpu.data<float>(), N,
                        0.0f, c.data<float>(), N, cuda::current_stream(0));
    }
    const parity::Comparison cmp = parity::compare(c.cpu(), expected, {K * 4 * 1e-3, 0.0});
    CHECK_MESSAGE(cmp.ok, cmp.summary());
  }

  TEST_CASE("ops::matmul on CUDA follows the TF32 twin while the precision is set") {
    // ops::matmul on CUDA is our GEMM: under TF32 it equals the twin to summation order.
    const Tensor a = random_cpu({19, 53}, 10), b = random_cpu({53, 71}, 11);
    Tensor expected = Tensor::zeros({19, 71});
    cpu::gemm_tf32(false, false, 19, 71, 53, 1.0f, a.data<float>(), 53, b.data<float>(), 71, 0.0f,
                   expected.data<float>(), 71);
    Tensor got;
    {
      Tf32Scope tf32;
      CHECK(ops::float32_precision() == Precision::Tf32);
      got = ops::matmul(a.to(Device::cuda(0)), b.to(Device::cuda(0))).cpu();
    }
    CHECK(ops::float32_precision() == Precision::Fp32);
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
    const Tensor x = random_cpu({3, 5, 11, 9}, 12), w = random_cpu({7, 5, 3, 3}, 13);
    const Tensor bias = random_cpu({7}, 14), g = random_cpu({3, 7, 6, 5}, 15);
    const Tensor y_cpu = ops::conv2d(tf32_rounded(x), tf32_rounded(w), bias, window);
    const ops::Conv2dGrads grads_cpu =
        ops::conv2d_backward(tf32_rounded(g), tf32_rounded(x), tf32_rounded(w), true, true, window);
    Tensor y;
    ops::Conv2dGrads grads;
    {
      Tf32Scope tf32;
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
