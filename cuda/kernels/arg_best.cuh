// The argmax rule every CUDA argmax shares (argmax and step_statistics in reduce.cu, the
// cross-entropy kernel's statistics in loss.cu), so that they pick the same element as the CPU
// twin (cpu::argmax, tensor/cpu/reduce.cpp): the first index wins a tie and NaN counts as largest.
// better() is a total order on (value, index), so a reduction may combine candidates in any order.
#pragma once

#include <cstdint>

namespace echelon::cuda {

struct ArgBest {
  float value;
  int64_t index;
};

__device__ __forceinline__ ArgBest better(ArgBest a, ArgBest b) {
  const bool a_nan = isnan(a.value), b_nan = isnan(b.value);
  if (a_nan != b_nan) return a_nan ? a : b;
  if (a_nan || a.value == b.value) return a.index <= b.index ? a : b;
  return a.value > b.value ? a : b;
}

}  // namespace echelon::cuda
