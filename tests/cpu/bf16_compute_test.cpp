// bfloat16 tensors that compute (issue 10, bf16 activations step 2): relu, its backward and add
// load bfloat16, compute in float and store rounded to nearest even (PyTorch's bits for its bf16
// elementwise ops), on contiguous, transposed, strided and broadcast operands; every other op
// still refuses bfloat16 with the hint. The CUDA kernels give the same bits: parity cases
// bf16_compute/* (tests/support/parity_bf16.cpp) and tests/gpu/bf16_gpu_test.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/kernels/bf16.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

using namespace echelon;

namespace {

std::vector<uint16_t> bits_of(const Tensor& bf16) {
  std::vector<uint16_t> out;
  for (const bfloat16 v : bf16.to_vector<bfloat16>()) out.push_back(v.bits);
  return out;
}

Tensor bf16_of(const std::vector<float>& values, const Shape& shape) {
  return ops::cast(Tensor::from_vector(values, shape), kBFloat16);
}

// The float values of a bfloat16 tensor (exact), in its logical order.
std::vector<float> floats_of(const Tensor& bf16) {
  return ops::cast(bf16.contiguous(), kFloat32).to_vector<float>();
}

// Random values in [-2, 2) rounded to bfloat16 (so they are the tensor's exact values).
Tensor random_bf16(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return ops::cast(ops::add(ops::mul(ops::rand(shape, gen), 4.0), -2.0), kBFloat16);
}

}  // namespace

TEST_SUITE("bf16_compute") {
  TEST_CASE("add rounds the float sum to nearest even: PyTorch's bits on ties") {
    const float lsb = std::ldexp(1.0f, -7), half = std::ldexp(1.0f, -8);  // at 1.0
    // torch.tensor([...], dtype=torch.bfloat16) + torch.tensor([...], dtype=torch.bfloat16)
    const Tensor a = bf16_of({1.0f, 1.0f + lsb, 1.0f, -1.0f - lsb, 3.0e38f, 2.5f}, {6});
    const Tensor b = bf16_of({half, half, 1.5f * half, -half, 3.0e38f, -2.5f}, {6});
    const Tensor sum = ops::add(a, b);
    CHECK(sum.dtype() == kBFloat16);
    // 1 + 2^-8: a tie, even below (1.0); (1 + 2^-7) + 2^-8: a tie, even above (1 + 2^-6);
    // 1 + 1.5 * 2^-8: above the tie (1 + 2^-7); negative tie; 6e38 overflows to +inf; 0.
    CHECK(bits_of(sum) == std::vector<uint16_t>{0x3f80, 0x3f82, 0x3f81, 0xbf82, 0x7f80, 0x0000});
  }

  TEST_CASE("relu and relu's backward on bfloat16: zero below, the value (or gradient) above") {
    const Tensor x = bf16_of({-1.5f, 0.0f, 2.0f, NAN, -INFINITY, INFINITY, 1e-30f}, {7});
    const Tensor y = ops::relu(x);
    CHECK(y.dtype() == kBFloat16);
    // x > 0 ? x : 0, as the float32 twin: NaN is not > 0, so 0.
    const std::vector<float> want = {0.0f, 0.0f, 2.0f, 0.0f, 0.0f, INFINITY, floats_of(x)[6]};
    CHECK(floats_of(y) == want);
    const Tensor g = bf16_of({3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f}, {7});
    const Tensor gx = ops::unary_backward(UnaryOp::Relu, g, x, y);
    CHECK(gx.dtype() == kBFloat16);
    CHECK(floats_of(gx) == std::vector<float>{0.0f, 0.0f, 5.0f, 0.0f, 0.0f, 8.0f, 9.0f});
  }

  TEST_CASE("bfloat16 relu and add equal the float32 op rounded once, on views and broadcasts") {
    const Tensor a = random_bf16({13, 37}, 1), b = random_bf16({13, 37}, 2);
    const Tensor row = random_bf16({37}, 3);
    const auto fp32 = [](const Tensor& t) { return ops::cast(t, kFloat32); };
    const auto expect_rounded = [&](const Tensor& got, const Tensor& want_fp32) {
      REQUIRE(got.dtype() == kBFloat16);
      CHECK(bits_of(got) == bits_of(ops::cast(want_fp32, kBFloat16)));
    };
    // The float32 ops on bf16 values are exact in float up to their own rounding; one rounding
    // to bfloat16 after gives the bits the bfloat16 ops must store.
    expect_rounded(ops::relu(a), ops::relu(fp32(a)));
    expect_rounded(ops::relu(a.transpose(0, 1)), ops::relu(fp32(a).transpose(0, 1)));
    expect_rounded(ops::add(a, b), ops::add(fp32(a), fp32(b)));
    expect_rounded(ops::add(a.transpose(0, 1), b.transpose(0, 1)),
                   ops::add(fp32(a).transpose(0, 1), fp32(b).transpose(0, 1)));
    expect_rounded(ops::add(a, row), ops::add(fp32(a), fp32(row)));  // broadcast row
    expect_rounded(ops::add(row, a), ops::add(fp32(row), fp32(a)));
    const Tensor strided = a.narrow(1, 1, 20);  // rows 37 apart: not contiguous
    REQUIRE_FALSE(strided.is_contiguous());
    expect_rounded(ops::add(strided, strided), ops::add(fp32(strided), fp32(strided)));
    const Tensor g = random_bf16({13, 20}, 4);
    expect_rounded(
        ops::unary_backward(UnaryOp::Relu, g, strided, ops::relu(strided)),
        ops::unary_backward(UnaryOp::Relu, fp32(g), fp32(strided), ops::relu(fp32(strided))));
  }

  TEST_CASE("other ops still refuse bfloat16 and say which compute on it") {
    const Tensor h = Tensor::zeros({4}, kBFloat16);
    const char* hint = "bfloat16 computes only in relu, relu's backward and add so far";
    CHECK_THROWS_WITH_AS(ops::mul(h, h), doctest::Contains(hint), Error);
    CHECK_THROWS_WITH_AS(ops::sub(h, h), doctest::Contains(hint), Error);
    CHECK_THROWS_WITH_AS(ops::exp(h), doctest::Contains(hint), Error);
    CHECK_THROWS_WITH_AS(ops::unary_backward(UnaryOp::Tanh, h, h, h), doctest::Contains(hint),
                         Error);
    CHECK_THROWS_WITH_AS(ops::add(h, 1.0), doctest::Contains(hint), Error);  // scalar form
    CHECK_THROWS_WITH_AS(ops::sum(h), doctest::Contains("bfloat16"), Error);
    // Mixed dtypes are refused, not converted.
    CHECK_THROWS_WITH_AS(ops::add(h, Tensor::zeros({4})), doctest::Contains("dtype mismatch"),
                         Error);
  }
}
