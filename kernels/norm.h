// Normalisation geometry shared by the CPU twins (tensor/cpu/norm) and the CUDA kernels
// (cuda/kernels/norm): a tensor viewed as (N, C, S) with S the product of the spatial dims.
#pragma once

#include <cstdint>

namespace echelon {

struct NormArgs {
  int64_t n = 1, c = 1, spatial = 1;
};

}  // namespace echelon
