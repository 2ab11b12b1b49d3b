// How the direct convolution kernels (conv_direct.cu, conv_window.cu) round an operand as they
// stage it in shared memory under TF32 / bf16: as mma_tile.cuh's fragments round it (TF32: to
// nearest, ties away, wmma's __float_to_tf32; bf16: to nearest even), so that their fp32
// products of rounded values (exact: 11 x 11 or 8 x 8 significant bits fit fp32's 24) summed in
// fp32 follow the CPU twin on rounded inputs.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

#include <echelon/cuda/kernels/matmul.h>

namespace echelon::cuda {

enum class Rounding : int { None, Tf32, Bf16 };

// The rounding of the current float32 precision (host).
inline Rounding staged_rounding() {
  const Precision precision = float32_precision();
  return precision == Precision::Tf32   ? Rounding::Tf32
         : precision == Precision::Bf16 ? Rounding::Bf16
                                        : Rounding::None;
}

#if defined(__CUDACC__) || ECHELON_CUDA_SIM
__device__ __forceinline__ float staged(float v, Rounding rounding) {
  if (rounding == Rounding::Bf16) return __bfloat162float(__float2bfloat16_rn(v));
  if (rounding == Rounding::Tf32) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // TF32 needs sm_80 or newer
#else
    return nvcuda::wmma::__float_to_tf32(v);
#endif
  }
  return v;
}

// stage(std::integral_constant<Rounding, R>{}) for R = rounding: a staging loop compiled once per
// rounding, so that its loads do not test the rounding per element (conv_window.cu's and
// conv_direct.cu's staging).
template <typename Stage>
__device__ __forceinline__ void with_rounding(Rounding rounding, Stage&& stage) {
  if (rounding == Rounding::None)
    stage(std::integral_constant<Rounding, Rounding::None>{});
  else if (rounding == Rounding::Tf32)
    stage(std::integral_constant<Rounding, Rounding::Tf32>{});
  else
    stage(std::integral_constant<Rounding, Rounding::Bf16>{});
}
#endif

}  // namespace echelon::cuda
