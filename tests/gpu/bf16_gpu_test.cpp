// Precision::Bf16 on CUDA (--precision bf16): our tensor-core SGEMM on bf16 operands against its
// CPU twin cpu::gemm_bf16 in every mode the launchers have (both transposes, strided batches, the
// fused row bias, batch-reduce, k-slices of 16 with tails), the rounding itself (K = 1 products
// isolate it: nearest, ties to even), cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF, and ops::matmul
// on non-contiguous views. The checks shared with tf32_gpu_test.cpp are in
// reduced_precision_gemm.h; the convolution directions are in conv_gpu_test.cpp. In the emulation
// build the fragments come from cuda/sim/include/mma.h; on a GPU from the tensor cores.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <echelon/kernels/bf16.h>

#include "tests/gpu/reduced_precision_gemm.h"

using namespace echelon;
using namespace echelon::reduced_precision;

TEST_SUITE("bf16_gpu") {
  TEST_CASE("K = 1 products show the device's rounding: equal to round_to_bf16 bit for bit") {
    std::vector<float> values = {1.0f + std::ldexp(1.0f, -8),          // tie, even below: 1
                                 1.0f + 3 * std::ldexp(1.0f, -8),      // tie, even above
                                 -1.0f - std::ldexp(1.0f, -8),         // tie, negative
                                 1.0f + std::ldexp(1.0f, -8) + 1e-7f,  // just above the tie
                                 3.14159265f,
                                 -2.71828183f,
                                 3.4e38f,     // rounds past bf16's largest finite: infinity
                                 -7.5e-20f};  // no subnormals: tensor cores may flush them
    const std::vector<float> got = check_k1_rounding(Precision::Bf16, values, round_to_bf16);
    CHECK(got[0] == 1.0f);
    CHECK(got[1] == 1.0f + 4 * std::ldexp(1.0f, -8));
    CHECK(std::isinf(got[6]));
  }

  TEST_CASE("our tensor-core SGEMM equals cpu::gemm_bf16: transposes, alpha, beta, odd sizes") {
    // k-slices of 16 with a tail of 5. Against fp32 products the error is bf16's (~1e-2).
    check_gemm_transposes(Precision::Bf16, cpu::gemm_bf16, {1e-3, 1e-3}, 0.5, "bf16");
  }

  TEST_CASE("the 128x128 tensor-core tile at M, N >= 128 equals the twin") {
    // k-slices of 32 (two MMA k-steps): every transpose, tails in m, n and k, batches, bias,
    // batch-reduce.
    check_large_tile(Precision::Bf16, cpu::gemm_bf16, {1e-3, 1e-3}, 2.0, "bf16");  // K = 45
  }

  TEST_CASE("strided batches, the fused row bias and batch-reduce under bf16") {
    check_batched_modes(Precision::Bf16, cpu::gemm_bf16);
  }

  TEST_CASE(
      "cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF agrees with cpu::gemm_bf16 to bf16 accuracy") {
    // bf16's bound: 2^-8 relative per input, twice per product, over K products of |a b| <= 4.
    const int64_t K = 24;
    check_cublas(Precision::Bf16, cpu::gemm_bf16, 40, 30, K, K * 4 * 2 * std::ldexp(1.0, -8));
  }

  TEST_CASE("ops::matmul on CUDA follows the bf16 twin on non-contiguous views") {
    // A transposed view and a column-narrowed view: ops::matmul hands our GEMM the strides (or a
    // contiguous copy); either way the products are bf16's.
    const Tensor a_storage = parity::random_cpu({53, 19}, 10, 2.0),
                 b_storage = parity::random_cpu({53, 80}, 11, 2.0);
    const Tensor a = a_storage.transpose(0, 1);   // (19, 53), column-major
    const Tensor b = b_storage.narrow(1, 3, 71);  // (53, 71), row stride 80
    const Tensor a_dense = a.contiguous(), b_dense = b.contiguous();
    Tensor expected = Tensor::zeros({19, 71});
    cpu::gemm_bf16(false, false, 19, 71, 53, 1.0f, a_dense.data<float>(), 53, b_dense.data<float>(),
                   71, 0.0f, expected.data<float>(), 71);
    const Tensor a_gpu = a_storage.to(Device::cuda(0)).transpose(0, 1);
    const Tensor b_gpu = b_storage.to(Device::cuda(0)).narrow(1, 3, 71);
    CHECK(!a_gpu.is_contiguous());
    CHECK(!b_gpu.is_contiguous());
    // Our GEMM, not cuBLAS (whose FAST_16BF rounding differs from the twin's: the test above).
    const ops::MatmulImpl previous = ops::matmul_impl();
    ops::set_matmul_impl(ops::MatmulImpl::Ours);
    const Tensor got = matmul_under(Precision::Bf16, a_gpu, b_gpu);
    ops::set_matmul_impl(previous);
    const parity::Comparison cmp = parity::compare(got, expected, kSameRounding);
    CHECK_MESSAGE(cmp.ok, cmp.summary());
  }

  TEST_CASE("bfloat16 relu, relu's backward and add on CUDA: the CPU twin's bits, special values") {
    // Ties (to even both ways), overflow to infinity, infinities, NaN, zeros of both signs, tiny
    // values (bfloat16 keeps subnormals): the parity cases draw only values in [-1, 1).
    const float half = std::ldexp(1.0f, -8), lsb = std::ldexp(1.0f, -7);
    const std::vector<float> a = {1.0f,   1.0f + lsb, -1.0f - lsb, 3.0e38f, INFINITY, NAN,  -0.0f,
                                  1e-39f, -2.5f,      -INFINITY,   0.5f,    7.0f,     -3.0f};
    const std::vector<float> b = {half,   half, -half, 3.0e38f,     -INFINITY, 1.0f, 0.0f,
                                  1e-39f, 2.5f, 1.0f,  1.5f * half, NAN,       3.0f};
    const int64_t n = static_cast<int64_t>(a.size());
    const Tensor ha = ops::cast(Tensor::from_vector(a, {n}), kBFloat16);
    const Tensor hb = ops::cast(Tensor::from_vector(b, {n}), kBFloat16);
    const Tensor da = ha.to(Device::cuda(0)), db = hb.to(Device::cuda(0));
    // A NaN that arithmetic made has no promised bits (x86 keeps the operand's, a GPU writes its
    // canonical NaN): any NaN stands for all.
    const auto bits = [](const Tensor& t) {
      std::vector<uint16_t> out;
      for (const bfloat16 v : t.cpu().to_vector<bfloat16>())
        out.push_back((v.bits & 0x7fffu) > 0x7f80u ? uint16_t{0x7fc0} : v.bits);
      return out;
    };
    CHECK(bits(ops::add(da, db)) == bits(ops::add(ha, hb)));
    CHECK(bits(ops::relu(da)) == bits(ops::relu(ha)));
    CHECK(bits(ops::unary_backward(UnaryOp::Relu, db, da, ops::relu(da))) ==
          bits(ops::unary_backward(UnaryOp::Relu, hb, ha, ops::relu(ha))));
    CHECK(bits(ops::add(da, db))[1] == 0x3f82);  // (1 + 2^-7) + 2^-8: the tie rounds up to even
  }
}
