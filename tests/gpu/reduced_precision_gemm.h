// The GEMM checks that tf32_gpu_test.cpp and bf16_gpu_test.cpp share: each runs our tensor-core
// kernel (or cuBLAS) under one reduced Precision and compares it with that precision's CPU twin
// (cpu::gemm_tf32 or cpu::gemm_bf16). The suites pass the precision, the twin and the bounds that
// differ between them.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>

#include "tests/support/float_bits.h"
#include "tests/support/parity.h"

namespace echelon::reduced_precision {

// cpu::gemm_tf32 / cpu::gemm_bf16: C = alpha op(A) op(B) + beta C with rounded operands.
using CpuTwin = void (*)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
                         float* C, int64_t ldc);

using test::from_bits;

// Sets the process-wide precision for one test and restores fp32 after it.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision precision) { ops::set_float32_precision(precision); }
  ~PrecisionScope() { ops::set_float32_precision(Precision::Fp32); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

// Only the summation order separates the kernel (fp32, k in order) from the twin (double): a few
// fp32 ulps of sums of |a b| <= 4 over K <= 45 terms.
constexpr parity::Tolerance kSameRounding{1e-4, 1e-5};

// C = alpha op(A) op(B) + beta C on the device under `precision` (our kernel), returned on the CPU;
// lda, ldb: the row lengths of a and b (0: tight).
inline Tensor device_gemm(Precision precision, bool trans_a, bool trans_b, int64_t M, int64_t N,
                          int64_t K, float alpha, const Tensor& a, const Tensor& b, float beta,
                          const Tensor& c0, int64_t lda = 0, int64_t ldb = 0) {
  const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
  Tensor c = c0.to(Device::cuda(0));
  {
    PrecisionScope scope(precision);
    cuda::gemm(trans_a, trans_b, M, N, K, alpha, a_gpu.data<float>(), lda ? lda : (trans_a ? M : K),
               b_gpu.data<float>(), ldb ? ldb : (trans_b ? K : N), beta, c.data<float>(), N,
               cuda::current_stream(0));
  }
  return c.cpu();
}

// The K = 1 rounding probe: appends 250 pseudo-random +-[0.5, 1) values of any mantissa to
// `values` (more than four 64-row tiles in all), runs op(A) (M, 1) = values times B (1, 1) = 1 on
// the device, so C = round(a) * 1 exactly, and checks every element against `round` bit for bit.
// Returns the device's products for the caller's own checks.
inline std::vector<float> check_k1_rounding(Precision precision, std::vector<float>& values,
                                            float (*round)(float)) {
  uint32_t state = 12345;
  for (int i = 0; i < 250; ++i) {
    state = state * 1664525u + 1013904223u;
    values.push_back(from_bits((state & 0x807fffffu) | 0x3f000000u));
  }
  const auto m = static_cast<int64_t>(values.size());
  const Tensor a = Tensor::from_vector(values, {m, 1});
  const Tensor one = Tensor::from_vector(std::vector<float>{1.0f}, {1, 1});
  const std::vector<float> got =
      device_gemm(precision, false, false, m, 1, 1, 1.0f, a, one, 0.0f, Tensor::full({m, 1}, NAN))
          .to_vector<float>();
  int mismatches = 0;
  for (int64_t i = 0; i < m; ++i)
    if (got[i] != round(values[i])) {
      if (++mismatches <= 5)
        MESSAGE("value ", i, ": ", values[i], " -> ", got[i], ", expected ", round(values[i]));
    }
  CHECK(mismatches == 0);
  return got;
}

// Our SGEMM equals the twin in all four transposes with alpha, beta and odd sizes (by default
// two 64-row tiles and a k-slice tail; M, N >= 128 reach the 128x128 tile), with tight rows
// (element loads) and with rows padded to 16 bytes (the 16-byte paths: cp.async under TF32,
// float4 loads, runs cut by the matrix edge). The rounding is really there: against fp32 products
// the result differs by more than `vs_fp32` allows, but by less than `max_vs_fp32`.
inline void check_gemm_transposes(Precision precision, CpuTwin twin,
                                  const parity::Tolerance& vs_fp32_tolerance, double max_vs_fp32,
                                  const std::string& name, int64_t M = 70, int64_t N = 45,
                                  int64_t K = 37) {
  for (const bool padded : {false, true})
    for (const bool trans_a : {false, true})
      for (const bool trans_b : {false, true}) {
        CAPTURE(padded);
        const auto row = [padded](int64_t cols) { return padded ? (cols + 3) / 4 * 4 : cols; };
        const int64_t lda = row(trans_a ? M : K), ldb = row(trans_b ? K : N);
        const Tensor a = parity::random_cpu(trans_a ? Shape{K, lda} : Shape{M, lda}, 1, 2.0);
        const Tensor b = parity::random_cpu(trans_b ? Shape{N, ldb} : Shape{K, ldb}, 2, 2.0);
        const Tensor c0 = parity::random_cpu({M, N}, 3, 2.0);
        Tensor expected = c0.clone(), fp32 = c0.clone();
        twin(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(), ldb, -0.5f,
             expected.data<float>(), N);
        cpu::gemm<float>(trans_a, trans_b, M, N, K, 1.5f, a.data<float>(), lda, b.data<float>(),
                         ldb, -0.5f, fp32.data<float>(), N);
        const Tensor got =
            device_gemm(precision, trans_a, trans_b, M, N, K, 1.5f, a, b, -0.5f, c0, lda, ldb);
        const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
        CHECK_MESSAGE(cmp.ok, "trans_a=", trans_a, " trans_b=", trans_b, ": ", cmp.summary());
        const parity::Comparison vs_fp32 = parity::compare(got, fp32, vs_fp32_tolerance);
        CHECK_MESSAGE(!vs_fp32.ok, name, " result equals the fp32 one: ", vs_fp32.summary());
        CHECK_MESSAGE(vs_fp32.max_abs_error < max_vs_fp32, vs_fp32.summary());
      }
}

// Strided batches, the fused row bias (with and without the ReLU) and batch-reduce (groups of 2
// over 5 batches, the last one short) against the twin. By default K = 20: one full k-slice of 16
// (bf16) or two of 8 (TF32), and a tail; M, N >= 128 reach the 128x128 tile.
inline void check_batched_modes(Precision precision, CpuTwin twin, int64_t M = 33, int64_t N = 67,
                                int64_t K = 20) {
  const int64_t batch = 5;
  const Tensor a = parity::random_cpu({batch, M, K}, 4, 2.0),
               b = parity::random_cpu({batch, N, K}, 5, 2.0);
  const Tensor bias = parity::random_cpu({M}, 6, 2.0),
               c0 = parity::random_cpu({batch, M, N}, 7, 2.0);
  const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
  const Tensor bias_gpu = bias.to(Device::cuda(0));
  Tensor batched = c0.to(Device::cuda(0));
  Tensor biased = Tensor::full({batch, M, N}, NAN, kFloat32, Device::cuda(0));
  Tensor clamped = biased.clone();  // the row bias and the ReLU (conv2d_relu's columns path)
  const int64_t per_group = 2, groups = 3;
  Tensor reduced = c0.narrow(0, 0, groups).contiguous().to(Device::cuda(0));
  {
    PrecisionScope scope(precision);
    const cudaStream_t stream = cuda::current_stream(0);
    cuda::gemm_strided_batched(false, true, M, N, K, 1.0f, a_gpu.data<float>(), K, M * K,
                               b_gpu.data<float>(), K, N * K, 2.0f, batched.data<float>(), N, M * N,
                               batch, stream);
    cuda::gemm_strided_batched_row_bias(false, true, M, N, K, a_gpu.data<float>(), K, M * K,
                                        b_gpu.data<float>(), K, N * K, bias_gpu.data<float>(),
                                        biased.data<float>(), N, M * N, batch, false, stream);
    cuda::gemm_strided_batched_row_bias(false, true, M, N, K, a_gpu.data<float>(), K, M * K,
                                        b_gpu.data<float>(), K, N * K, bias_gpu.data<float>(),
                                        clamped.data<float>(), N, M * N, batch, true, stream);
    cuda::gemm_batch_reduce(false, true, M, N, K, 1.0f, a_gpu.data<float>(), K, M * K,
                            b_gpu.data<float>(), K, N * K, 0.5f, reduced.data<float>(), N, M * N,
                            batch, per_group, stream);
  }
  const Tensor got_batched = batched.cpu(), got_biased = biased.cpu(), got_reduced = reduced.cpu();
  const Tensor got_clamped = clamped.cpu();
  const auto product = [&](int64_t i) {
    Tensor p = Tensor::zeros({M, N});
    twin(false, true, M, N, K, 1.0f, a.data<float>() + i * M * K, K, b.data<float>() + i * N * K, K,
         0.0f, p.data<float>(), N);
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
    CHECK_MESSAGE(
        parity::compare(got_clamped.select(0, i), ops::relu(want_biased), kSameRounding).ok,
        "row bias + ReLU, batch ", i);
  }
  for (int64_t g = 0; g < groups; ++g) {
    Tensor want = ops::mul(c0.select(0, g), 0.5);
    for (int64_t i = g * per_group; i < std::min(batch, (g + 1) * per_group); ++i)
      want = ops::add(want, product(i));
    CHECK_MESSAGE(parity::compare(got_reduced.select(0, g), want, kSameRounding).ok, "group ", g);
  }
}

// cuBLAS under `precision` (plain and strided-batched with stride 0 over A and B, so both batch
// entries are the same product) agrees with the twin to within `max_abs_error`: cuBLAS may round
// its inputs differently (or not at all for a small problem), so the bound is the precision's.
inline void check_cublas(Precision precision, CpuTwin twin, int64_t M, int64_t N, int64_t K,
                         double max_abs_error) {
  const Tensor a = parity::random_cpu({M, K}, 8, 2.0), b = parity::random_cpu({K, N}, 9, 2.0);
  Tensor expected = Tensor::zeros({M, N});
  twin(false, false, M, N, K, 1.0f, a.data<float>(), K, b.data<float>(), N, 0.0f,
       expected.data<float>(), N);
  const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
  Tensor c = Tensor::full({M, N}, NAN, kFloat32, Device::cuda(0));
  Tensor batched = Tensor::full({2, M, N}, NAN, kFloat32, Device::cuda(0));
  {
    PrecisionScope scope(precision);
    const cudaStream_t stream = cuda::current_stream(0);
    cuda::gemm_cublas(false, false, M, N, K, 1.0f, a_gpu.data<float>(), K, b_gpu.data<float>(), N,
                      0.0f, c.data<float>(), N, stream);
    cuda::gemm_strided_batched_cublas(false, false, M, N, K, 1.0f, a_gpu.data<float>(), K, 0,
                                      b_gpu.data<float>(), N, 0, 0.0f, batched.data<float>(), N,
                                      M * N, 2, stream);
  }
  const parity::Tolerance bound{max_abs_error, 0.0};
  const parity::Comparison cmp = parity::compare(c.cpu(), expected, bound);
  CHECK_MESSAGE(cmp.ok, cmp.summary());
  const Tensor got_batched = batched.cpu();
  for (int64_t i = 0; i < 2; ++i)
    CHECK_MESSAGE(parity::compare(got_batched.select(0, i), expected, bound).ok, "batch ", i);
}

// ops::matmul of two CUDA tensors (M, K) x (K, N) under `precision`, on the CPU; checks that the
// scope sets the precision and restores fp32 after it.
inline Tensor matmul_under(Precision precision, const Tensor& a_gpu, const Tensor& b_gpu) {
  Tensor got;
  {
    PrecisionScope scope(precision);
    CHECK(ops::float32_precision() == precision);
    got = ops::matmul(a_gpu, b_gpu).cpu();
  }
  CHECK(ops::float32_precision() == Precision::Fp32);
  return got;
}

// The 128x128 tensor-core tile (cuda::set_mma_tile: Auto, the default, takes it here) against
// the twin: 2 x 2 tiles in every transpose, tight and padded rows, and the batched modes (K = 45:
// a k-slice tail of 13 under both precisions; M, N: tails of 2 and 3); the modes' choice of tile.
inline void check_large_tile(Precision precision, CpuTwin twin,
                             const parity::Tolerance& vs_fp32_tolerance, double max_vs_fp32,
                             const std::string& name) {
  REQUIRE(cuda::mma_tile() == cuda::MmaTile::Auto);
  CHECK(cuda::mma_large_tile_for(130, 131, 4));
  CHECK_FALSE(cuda::mma_large_tile_for(127, 260, 6));
  check_gemm_transposes(precision, twin, vs_fp32_tolerance, max_vs_fp32, name, 130, 131, 45);
  check_batched_modes(precision, twin, 129, 131, 45);
  cuda::set_mma_tile(cuda::MmaTile::Small);  // ECHELON_MMA_TILE=64
  CHECK_FALSE(cuda::mma_large_tile_for(130, 131, 4));
  cuda::set_mma_tile(cuda::MmaTile::Large);  // ECHELON_MMA_TILE=128: no fill rule
  CHECK(cuda::mma_large_tile_for(128, 128, 1));
  cuda::set_mma_tile(cuda::MmaTile::Auto);
}

}  // namespace echelon::reduced_precision
