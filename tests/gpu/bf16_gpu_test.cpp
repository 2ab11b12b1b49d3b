// Precision::Bf16 on CUDA (--precision bf16): our tensor-core SGEMM on bf16 operands against its
// CPU twin cpu::gemm_bf16 in every mode the launchers have (both transposes, strided batches, the
// fused row bias, batch-reduce, k-slices of 16 with tails), the rounding itself (K = 1 products
// isolate it: nearest, ties to even), cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF, and ops::matmul
// on non-contiguous views. The convolution directions are in conv_gpu_test.cpp. In the emulation
// build the fragments come from cuda/sim/include/mma.h; on a GPU from the tensor cores.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/kernels/bf16.h>
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
struct Bf16Scope {
  Bf16Scope() { ops::set_float32_precision(Precision::Bf16); }
  ~Bf16Scope() { ops::set_float32_precision(Precision::Fp32); }
  Bf16Scope(const Bf16Scope&) = delete;
  Bf16Scope& operator=(const Bf16Scope&) = delete;
};

float from_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// Only the summation order separates the kernel (fp32, k in order) from the twin (double): a few
// fp32 ulps of sums of |a b| <= 4 over K <= 45 terms.
constexpr parity::Tolerance kSameRounding{1e-4, 1e-5};

// C = alpha op(A) op(B) + beta C on the device under bf16 (our kernel), returned on the CPU.
Tensor device_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                   const Tensor& a, const Tensor& b, float beta, const Tensor& c0) {
  const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
  Tensor c = c0.to(Device::cuda(0));
  {
    Bf16Scope bf16;
    cuda::gemm(trans_a, trans_b, M, N, K, alpha, a_gpu.data<float>(), trans_a ? M : K,
               b_gpu.data<float>(), trans_b ? K : N, beta, c.data<float>(), N,
               cuda::current_stream(0));
  }
  return c.cpu();
}

}  // namespace

TEST_SUITE("bf16_gpu") {
  TEST_CASE("K = 1 products show the device's rounding: equal to round_to_bf16 bit for bit") {
    // op(A) (M, 1) holds the values to round, B (1, 1) is 1, so C = bf16(a) * 1 exactly.
    std::vector<float> values = {1.0f + std::ldexp(1.0f, -8),          // tie, even below: 1
                                 1.0f + 3 * std::ldexp(1.0f, -8),      // tie, even above
                                 -1.0f - std::ldexp(1.0f, -8),         // tie, negative
                                 1.0f + std::ldexp(1.0f, -8) + 1e-7f,  // just above the tie
                                 3.14159265f,
                                 -2.71828183f,
                                 3.4e38f,     // rounds past bf16's largest finite: infinity
                                 -7.5e-20f};  // no subnormals: tensor cores may flush them
    uint32_t state = 12345;
    for (int i = 0; i < 250; ++i) {  // 258 values in all: more than four 64-row tiles
      state = state * 1664525u + 1013904223u;
      values.push_back(from_bits((state & 0x807fffffu) | 0x3f000000u));  // +-[0.5, 1), any mantissa
    }
    const auto m = static_cast<int64_t>(values.size());
    const Tensor a = Tensor::from_vector(values, {m, 1});
    const Tensor one = Tensor::from_vector(std::vector<float>{1.0f}, {1, 1});
    const std::vector<float> got =
        device_gemm(false, false, m, 1, 1, 1.0f, a, one, 0.0f, Tensor::full({m, 1}, NAN))
            .to_vector<float>();
    int mismatches = 0;
    for (int64_t i = 0; i < m; ++i)
      if (got[i] != round_to_bf16(values[i])) {
        if (++mismatches <= 5)
          MESSAGE("value ", i, ": ", values[i], " -> ", got[i], ", expected ",
                  round_to_bf16(values[i]));
      }
    CHECK(mismatches == 0);
    CHECK(got[0] == 1.0f);
    CHECK(got[1] == 1.0f + 4 * std::ldexp(1.0f, -8));
    CHECK(std::isinf(got[6]));
  }

  TEST_CASE("our tensor-core SGEMM equals cpu::gemm_bf16: transposes, alpha, beta, odd sizes") {
    const int64_t M = 70, N = 45, K = 37;  // two 64-row tiles, k-slices of 16 with a tail of 5
    for (const bool trans_a : {false, true})
      for (const bool trans_b : {false, true}) {
        const Tensor a = random_cpu(trans_a ? Shape{K, M} : Shape{M, K}, 1);
        const Tensor b = random_cpu(trans_b ? Shape{N, K} : Shape{K, N}, 2);
        const Tensor c0 = random_cpu({M, N}, 3);
        Tensor expected = c0.clone(), fp32 = c0.clone();
        const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N;
        cpu::gemm_bf16(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(), ldb,
                       -0.5f, expected.data<float>(), N);
        cpu::gemm<float>(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(),
                         ldb, -0.5f, fp32.data<float>(), N);
        const Tensor got = device_gemm(trans_a, trans_b, M, N, K, 1.5f, a, b, -0.5f, c0);
        const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
        CHECK_MESSAGE(cmp.ok, "trans_a=", trans_a, " trans_b=", trans_b, ": ", cmp.summary());
        // The rounding is really there: against fp32 products the error is bf16's (~1e-2), far
        // above the summation-order differences of the check above.
        const parity::Comparison vs_fp32 = parity::compare(got, fp32, {1e-3, 1e-3});
        CHECK_MESSAGE(!vs_fp32.ok, "bf16 result equals the fp32 one: ", vs_fp32.summary());
        CHECK_MESSAGE(vs_fp32.max_abs_error < 0.5, vs_fp32.summary());
      }
  }

  TEST_CASE("strided batches, the fused row bias and batch-reduce under bf16") {
    const int64_t M = 33, N = 67, K = 20, batch = 5;  // K: one full k-slice of 16 and a tail
    const Tensor a = random_cpu({batch, M, K}, 4), b = random_cpu({batch, N, K}, 5);
    const Tensor bias = random_cpu({M}, 6), c0 = random_cpu({batch, M, N}, 7);
    const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
    const Tensor bias_gpu = bias.to(Device::cuda(0));
    Tensor batched = c0.to(Device::cuda(0));
    Tensor biased = Tensor::full({batch, M, N}, NAN, kFloat32, Device::cuda(0));
    const int64_t per_group = 2, groups = 3;
    Tensor reduced = c0.narrow(0, 0, groups).contiguous().to(Device::cuda(0));
    {
      Bf16Scope bf16;
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
    const auto product = [&](int64_t i) {
      Tensor p = Tensor::zeros({M, N});
      cpu::gemm_bf16(false, true, M, N, K, 1.0f, a.data<float>() + i * M * K, K,
                     b.data<float>() + i * N * K, K, 0.0f, p.data<float>(), N);
      return p;
    };
    for (int64_t i = 0; i < batch; ++i) {
      const Tensor p = product(i);
      const Tensor want_batched = ops::add(p, ops::mul(c0.select(0, i), 2.0));
      const Tensor want_biased = ops::add(p, bias.reshape({M, 1}));
      CHECK_MESSAGE(parity::compare(got_batched.select(0, i), want_batched, kSameRounding).ok,
                    "batch ", i);
      CHECK_MESSAGE(parity::compare(got_biased.select(0, i), want_biased, kSameRounding).ok,
                    "row bias, batch ", i);
    }
    for (int64_t g = 0; g < groups; ++g) {
      Tensor want = ops::mul(c0.select(0, g), 0.5);
      for (int64_t i = g * per_group; i < std::min(batch, (g + 1) * per_group); ++i)
        want = ops::add(want, product(i));
      CHECK_MESSAGE(parity::compare(got_reduced.select(0, g), want, kSameRounding).ok, "group ", g);
    }
  }

  TEST_CASE(
      "cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF agrees with cpu::gemm_bf16 to bf16 accuracy") {
    // cuBLAS may pick another down-conversion (or none) for a small problem, so the bound is
    // bf16's: 2^-8 relative per input, twice per product, over K products of |a b| <= 4.
    const int64_t M = 40, N = 30, K = 24;
    const Tensor a = random_cpu({M, K}, 8), b = random_cpu({K, N}, 9);
    Tensor expected = Tensor::zeros({M, N}), fp32 = Tensor::zeros({M, N});
    cpu::gemm_bf16(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
                   expected.data<float>(), N);
    const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
    Tensor c = Tensor::full({M, N}, NAN, kFloat32, Device::cuda(0));
    Tensor batched = Tensor::full({2, M, N}, NAN, kFloat32, Device::cuda(0));
    {
      Bf16Scope bf16;
      const cudaStream_t stream = cuda::current_stream(0);
      cuda::gemm_cublas(false, false, M, N, K, 1.0f, a_gpu.data<float>(), K, b_gpu.data<float>(), N,
                        0.0f, c.data<float>(), N, stream);
      // Stride 0 over A and B: both batch entries are the same product.
      cuda::gemm_strided_batched_cublas(false, false, M, N, K, 1.0f, a_gpu.data<float>(), K, 0,
                                        b_gpu.data<float>(), N, 0, 0.0f, batched.data<float>(), N,
                                        M * N, 2, stream);
    }
    const parity::Tolerance bound{K * 4 * 2 * std::ldexp(1.0, -8), 0.0};
    const parity::Comparison cmp = parity::compare(c.cpu(), expected, bound);
    CHECK_MESSAGE(cmp.ok, cmp.summary());
    const Tensor got_batched = batched.cpu();
    for (int64_t i = 0; i < 2; ++i)
      CHECK_MESSAGE(parity::compare(got_batched.select(0, i), expected, bound).ok, "batch ", i);
  }

  TEST_CASE("ops::matmul on CUDA follows the bf16 twin on non-contiguous views") {
    // A transposed view and a column-narrowed view: ops::matmul hands our GEMM the strides (or a
    // contiguous copy); either way the products are bf16's.
    const Tensor a_storage = random_cpu({53, 19}, 10), b_storage = random_cpu({53, 80}, 11);
    const Tensor a = a_storage.transpose(0, 1);   // (19, 53), column-major
    const Tensor b = b_storage.narrow(1, 3, 71);  // (53, 71), row stride 80
    const Tensor a_dense = a.contiguous(), b_dense = b.contiguous();
    Tensor expected = Tensor::zeros({19, 71});
    cpu::gemm_bf16(false, false, 19, 71, 53, 1.0f, a_dense.data<float>(), 53, b_dense.data<float>(),
                   71, 0.0f, expected.data<float>(), 71);
    Tensor got;
    {
      Bf16Scope bf16;
      CHECK(ops::float32_precision() == Precision::Bf16);
      const Tensor a_gpu = a_storage.to(Device::cuda(0)).transpose(0, 1);
      const Tensor b_gpu = b_storage.to(Device::cuda(0)).narrow(1, 3, 71);
      CHECK(!a_gpu.is_contiguous());
      CHECK(!b_gpu.is_contiguous());
      got = ops::matmul(a_gpu, b_gpu).cpu();
    }
    CHECK(ops::float32_precision() == Precision::Fp32);
    const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
    CHECK_MESSAGE(cmp.ok, cmp.summary());
  }
}
