// FastDiv (kernels/fast_div.h), the conv gathers' division by a launch's sizes: the same
// quotient and remainder as C++'s / and % for every numerator in [0, 2^31) the kernels use.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <echelon/kernels/fast_div.h>

using echelon::FastDiv;

namespace {

// The first numerator in [lo, hi) where fast differs from / and %, or -1.
int64_t first_mismatch(const FastDiv& fast, int divisor, int64_t lo, int64_t hi) {
  for (int64_t n = lo; n < hi; ++n) {
    int q = 0, r = 0;
    fast.divmod(static_cast<int>(n), q, r);
    if (q != n / divisor || r != n % divisor || fast.div(static_cast<int>(n)) != q ||
        fast.mod(static_cast<int>(n)) != r)
      return n;
  }
  return -1;
}

}  // namespace

TEST_SUITE("fast_div") {
  TEST_CASE("every numerator below 2^16 and around multiples, for the divisors a conv has") {
    // Kernel and stride sizes, output widths and planes (LeNet-5 to VGG-16), powers of two and
    // their neighbours, primes.
    std::vector<int> divisors;
    for (int d = 1; d <= 300; ++d) divisors.push_back(d);
    for (int d : {1023, 1024, 1025, 3136, 4096, 12544, 50176, 65535, 65536, 65537, 1000003,
                  (1 << 30) - 1, 1 << 30, (1 << 30) + 1, 2147483647})
      divisors.push_back(d);
    for (int d : divisors) {
      const FastDiv fast(d);
      CAPTURE(d);
      CHECK(fast.divisor() == d);
      CHECK(first_mismatch(fast, d, 0, 1 << 16) == -1);
      CHECK(first_mismatch(fast, d, INT32_MAX - 4096, int64_t{INT32_MAX} + 1) == -1);
      // Around the multiples of d, where a multiplier one too small or large first errs.
      for (int64_t k = int64_t{INT32_MAX} / d; k > 0; k /= 3)
        CHECK(first_mismatch(fast, d, k * d - 2, std::min(k * d + 2, int64_t{INT32_MAX})) == -1);
    }
  }

  TEST_CASE("random numerators and divisors over the whole range") {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> numerator(0, INT32_MAX);
    std::uniform_int_distribution<int> log_divisor(0, 30);
    for (int trial = 0; trial < 2000; ++trial) {
      const int d = 1 + static_cast<int>(rng() % (uint32_t{1} << log_divisor(rng)));
      const FastDiv fast(d);
      for (int i = 0; i < 200; ++i) {
        const int n = numerator(rng);
        int q = 0, r = 0;
        fast.divmod(n, q, r);
        CAPTURE(d);
        CAPTURE(n);
        REQUIRE(q == n / d);
        REQUIRE(r == n % d);
      }
    }
  }

  TEST_CASE("the default and a divisor below 1 divide by 1") {
    CHECK(FastDiv().div(12345) == 12345);
    CHECK(FastDiv().mod(12345) == 0);
    CHECK(FastDiv(0).divisor() == 1);
    CHECK(FastDiv(0).div(INT32_MAX) == INT32_MAX);
  }
}
