// The bfloat16 rounding of the CPU twin (kernels/bf16.h) that --precision bf16's kernels are
// checked against: nearest with ties to even, infinities, NaN, subnormals, overflow, and
// cpu::gemm_bf16 being gemm over the rounded operands.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include <echelon/kernels/bf16.h>
#include <echelon/tensor/cpu/matmul.h>

#include "tests/support/float_bits.h"

using namespace echelon;

using test::bits_of;
using test::from_bits;

TEST_SUITE("bf16_round") {
  TEST_CASE("round_to_bf16: nearest, ties to even, both signs") {
    const float ulp = std::ldexp(1.0f, -7);  // bf16's ulp in [1, 2)
    CHECK(round_to_bf16(1.0f) == 1.0f);
    CHECK(round_to_bf16(1.0f + ulp / 2) == 1.0f);                   // tie, even below
    CHECK(round_to_bf16(1.0f + 3 * ulp / 2) == 1.0f + 2 * ulp);     // tie, even above
    CHECK(round_to_bf16(-1.0f - 3 * ulp / 2) == -1.0f - 2 * ulp);   // negative tie
    CHECK(round_to_bf16(1.0f + ulp / 2 + ulp / 64) == 1.0f + ulp);  // above the tie
    CHECK(round_to_bf16(1.0f + ulp / 2 - ulp / 64) == 1.0f);        // below the tie
    CHECK(round_to_bf16(2.0f - ulp / 4) == 2.0f);                   // carry into the exponent
    CHECK(bits_of(round_to_bf16(-0.0f)) == 0x80000000u);            // the sign of zero kept
    CHECK(bits_of(round_to_bf16(3.14159265f)) == 0x40490000u);      // pi -> 3.140625
  }

  TEST_CASE("round_to_bf16: infinities, NaN and overflow") {
    CHECK(round_to_bf16(INFINITY) == INFINITY);
    CHECK(round_to_bf16(-INFINITY) == -INFINITY);
    CHECK(std::isnan(round_to_bf16(NAN)));
    // A NaN whose payload lies only in the dropped bits must stay a NaN, not become infinity.
    CHECK(std::isnan(round_to_bf16(from_bits(0x7f800001u))));
    CHECK(std::isnan(round_to_bf16(from_bits(0xff80ffffu))));
    CHECK(std::isnan(round_to_bf16(from_bits(0x7fffffffu))));  // no carry out of the NaN
    CHECK(round_to_bf16(from_bits(0x7f7fffffu)) == INFINITY);  // FLT_MAX rounds up past the top
    CHECK(round_to_bf16(from_bits(0x7f7f7fffu)) == from_bits(0x7f7f0000u));  // bf16's largest
    CHECK(round_to_bf16(from_bits(0xff7f8000u)) == -INFINITY);  // a tie at the top: odd, so up
  }

  TEST_CASE("round_to_bf16: subnormals round like any other value") {
    CHECK(round_to_bf16(from_bits(0x00008000u)) == 0.0f);                    // tie, even is 0
    CHECK(round_to_bf16(from_bits(0x00018000u)) == from_bits(0x00020000u));  // tie, odd -> up
    CHECK(round_to_bf16(from_bits(0x00008001u)) == from_bits(0x00010000u));  // above the tie
    CHECK(round_to_bf16(from_bits(0x00007fffu)) == 0.0f);
    CHECK(round_to_bf16(from_bits(0x007fffffu)) == from_bits(0x00800000u));  // up to the normals
    CHECK(bits_of(round_to_bf16(from_bits(0x80004000u))) == 0x80000000u);    // -0, not +0
  }

  TEST_CASE("round_to_bf16 keeps 8 significant bits and is idempotent") {
    uint32_t state = 7;
    for (int i = 0; i < 10000; ++i) {
      state = state * 1664525u + 1013904223u;
      const float v = from_bits(state);
      if (std::isnan(v)) continue;
      const float r = round_to_bf16(v);
      CHECK((bits_of(r) & 0xffffu) == 0u);
      CHECK(bits_of(round_to_bf16(r)) == bits_of(r));
      // r is one of v's two bf16 neighbours (same sign), the nearer one.
      const float lo = from_bits(bits_of(v) & 0xffff0000u);
      const float hi = from_bits((bits_of(v) & 0xffff0000u) + 0x10000u);
      if (!std::isfinite(hi)) continue;
      CHECK((bits_of(r) == bits_of(lo) || bits_of(r) == bits_of(hi)));
      const double err = std::fabs(static_cast<double>(r) - v);
      CHECK(err <= std::fabs(static_cast<double>(lo) - v));
      CHECK(err <= std::fabs(static_cast<double>(hi) - v));
    }
  }

  TEST_CASE("cpu::gemm_bf16 is gemm over bf16-rounded operands") {
    const int64_t M = 5, N = 7, K = 9;
    std::vector<float> a(M * K), b(K * N), ra(M * K), rb(K * N);
    for (int64_t i = 0; i < M * K; ++i)
      a[i] = std::sin(0.7f * i) * 1.37f, ra[i] = round_to_bf16(a[i]);
    for (int64_t i = 0; i < K * N; ++i)
      b[i] = std::cos(0.3f * i) * 2.11f, rb[i] = round_to_bf16(b[i]);
    std::vector<float> got(M * N, NAN), want(M * N, NAN), plain(M * N, NAN);
    cpu::gemm_bf16(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, got.data(), N);
    cpu::gemm<float>(false, false, M, N, K, 1.0f, ra.data(), K, rb.data(), N, 0.0f, want.data(), N);
    cpu::gemm<float>(false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, plain.data(), N);
    CHECK(got == want);
    CHECK(got != plain);  // the rounding changes the result
  }
}
