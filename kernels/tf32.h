// TF32 rounding for the CPU twin of the tensor-core GEMM (tensor/cpu/matmul.cpp) and the tests
// (host code; the kernels round with CUDA's own intrinsic): a float rounded to TF32's 10 explicit
// mantissa bits (8-bit exponent, as fp32), to nearest with ties away from zero, as CUDA's
// `wmma::__float_to_tf32` (PTX cvt.rna.tf32.f32) does. The result is still a float, its low 13
// mantissa bits zero. The product of two TF32 values (11 x 11 significant bits) is exact in fp32,
// so only the inputs' rounding and the summation order separate a TF32 GEMM from an fp32 one.
#pragma once

#include <cstdint>
#include <cstring>

namespace echelon {

constexpr uint32_t kTf32DroppedBits = 0x1fffu;  // the 13 low mantissa bits TF32 does not keep

inline float round_to_tf32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u) return v;  // inf and NaN pass through
  // Sign and magnitude: adding half an ulp to the magnitude bits rounds ties away from zero for
  // both signs; a carry into the exponent is the correct next binade (or infinity).
  bits = (bits + 0x1000u) & ~kTf32DroppedBits;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace echelon
