// bfloat16: the rounding of the CPU twin of the bf16 tensor-core GEMM (tensor/cpu/matmul.cpp) and
// the tests (host code; the GEMM kernels convert with CUDA's __float2bfloat16_rn), and the element
// type of bfloat16 tensors (DType::BFloat16), which both backends convert with the same bits.
// bfloat16 keeps fp32's sign and 8-bit exponent and the top 7 mantissa bits: a float rounded to
// nearest, ties to even, as __float2bfloat16_rn (PTX cvt.rn.bf16.f32) does; infinities stay, a NaN
// stays a NaN (quiet), subnormals round like any other value (bfloat16 has them too). The result is
// still a float, its low 16 bits zero. The product of two bf16 values (8 x 8 significant bits) is
// exact in fp32, so only the inputs' rounding and the summation order separate a bf16 GEMM from an
// fp32 one.
#pragma once

#include <cstdint>
#include <cstring>

#include <echelon/base/op_kinds.h>

namespace echelon {

inline float round_to_bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    bits |= 0x00400000u;  // NaN: quieted, so dropping the low bits cannot make it an infinity
  } else {
    // Round half to even on the magnitude bits: add 0x7fff, plus 1 when the kept lsb is odd. A
    // carry into the exponent is the next binade (or infinity); infinity itself is unchanged.
    bits += 0x7fffu + ((bits >> 16) & 1u);
  }
  bits &= 0xffff0000u;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

// A bfloat16 tensor's element: the top 16 bits of the float it was rounded from. Host and device
// share these conversions (no <cuda_bf16.h>, which the CPU-only build lacks), so a cast gives the
// same bits on both; the layout is __nv_bfloat16's and PyTorch's (safetensors "BF16").
struct bfloat16 {
  uint16_t bits;
};

ECH_HD float bf16_to_float(bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.bits) << 16;
  float v;
  memcpy(&v, &bits, sizeof v);
  return v;
}

// Round to nearest, ties to even, as round_to_bf16 (a NaN stays a quiet NaN).
ECH_HD bfloat16 bf16_from_float(float v) {
  uint32_t bits;
  memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return bfloat16{static_cast<uint16_t>((bits | 0x00400000u) >> 16)};
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bfloat16{static_cast<uint16_t>(bits >> 16)};
}

}  // namespace echelon
