// CUDA emulation build (ECHELON_CUDA_SIM): stands in for <cuda_bf16.h> in the subset Echelon's
// kernels use: the __nv_bfloat16 storage type (16 bits: fp32's sign, exponent and top 7 mantissa
// bits) and the conversions to and from float.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t __x;  // the bits, as in CUDA's header
};

// Round to nearest bfloat16, ties to even (PTX cvt.rn.bf16.f32); a NaN stays a NaN (CUDA's
// canonical 0x7fff). Written as arithmetic on the value, not on its bits, so that the tests
// comparing it with the bit-level CPU rounding (kernels/bf16.h) compare two derivations.
inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  float rounded = v;
  if (std::isnan(v)) {
    return __nv_bfloat16{0x7fffu};
  } else if (std::isfinite(v) && v != 0.0f) {
    int exponent = 0;
    std::frexp(static_cast<double>(v), &exponent);  // |v| = f * 2^exponent, f in [0.5, 1)
    // 8 significant bits; subnormals keep fp32's fixed exponent, so their ulp is 2^-133.
    const double ulp = std::ldexp(1.0, std::max(exponent - 8, -133));
    const double r = std::nearbyint(std::fabs(static_cast<double>(v)) / ulp) * ulp;  // ties even
    rounded = r > static_cast<double>(FLT_MAX) ? INFINITY : static_cast<float>(r);
    rounded = std::copysign(rounded, v);
  }
  uint32_t bits;
  std::memcpy(&bits, &rounded, sizeof bits);
  return __nv_bfloat16{static_cast<uint16_t>(bits >> 16)};  // the low 16 bits are zero
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.__x) << 16;
  float v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
