// Division of a non-negative 32-bit int by a divisor fixed for a whole launch, as a multiply-high,
// an add and a shift (Granlund and Montgomery, "Division by Invariant Integers using
// Multiplication", 1994; CUTLASS's FastDivmod). The implicit-GEMM convolution's gathers
// (cuda/kernels/conv_operands.cuh) split every element's index by the kernel, output and image
// sizes: a 32-bit division by a runtime value is about 15 instructions on a GPU (a float
// reciprocal and two corrections), this is 3. The host computes the constants once per launch.
// Exact for numerators in [0, 2^31) and divisors in [1, 2^31): the quotient and remainder equal
// C++'s / and %, so results built from them are bit-identical.
#pragma once

#include <cstdint>

#include <echelon/base/op_kinds.h>

namespace echelon {

class FastDiv {
 public:
  FastDiv() = default;  // divides by 1

  // The constants for `divisor` (host code: one 64-bit division).
  explicit FastDiv(int divisor);

  ECH_HD int divisor() const { return static_cast<int>(divisor_); }

  // n / divisor for n in [0, 2^31).
  ECH_HD int div(int n) const {
    const uint32_t u = static_cast<uint32_t>(n);
#ifdef __CUDA_ARCH__
    const uint32_t high = __umulhi(u, multiplier_);
#else
    const uint32_t high = static_cast<uint32_t>((uint64_t{u} * multiplier_) >> 32);
#endif
    return static_cast<int>((high + u) >> shift_);  // high < u < 2^31: no carry out
  }
  ECH_HD int mod(int n) const {
    return n - div(n) * static_cast<int>(divisor_);
  }
  // quotient = n / divisor, remainder = n % divisor.
  ECH_HD void divmod(int n, int& quotient, int& remainder) const {
    quotient = div(n);
    remainder = n - quotient * static_cast<int>(divisor_);
  }

 private:
  uint32_t divisor_ = 1, multiplier_ = 1, shift_ = 0;
};

inline FastDiv::FastDiv(int divisor) : divisor_(static_cast<uint32_t>(divisor)) {
  // shift = ceil(log2 d); multiplier = floor(2^32 (2^shift - d) / d) + 1, which is below 2^32.
  // A divisor below 1 (a zero size of an empty convolution, which never divides) divides by 1.
  if (divisor < 1) {
    divisor_ = 1;
    return;
  }
  while ((uint64_t{1} << shift_) < divisor_) ++shift_;
  multiplier_ = static_cast<uint32_t>(
      ((uint64_t{1} << 32) * ((uint64_t{1} << shift_) - divisor_)) / divisor_ + 1);
}

}  // namespace echelon
