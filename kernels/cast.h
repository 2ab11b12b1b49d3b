// Element casts shared by the CPU twin (tensor/cpu/elementwise.cpp) and the CUDA kernel
// (cuda/kernels/elementwise.cu), so both give the same answer for every value.
#pragma once

#include <cstdint>
#include <type_traits>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/bf16.h>

namespace echelon {

// static_cast<Dst>(v), except that a floating value an integer type cannot hold (a negative
// value into uint8, 1e10 into int32, NaN) is undefined behaviour in C++ and differs between CPU
// and GPU. Defined here as PyTorch's CPU does in practice: truncate towards zero into int64, then
// wrap to the target's width (-2.5 -> uint8 254); NaN becomes 0, beyond int64 saturates.
// bfloat16 goes through float: in, exactly; out, rounded to nearest even (a double or an integer
// is first made a float, as PyTorch's c10::BFloat16 does, so it may round twice).
template <typename Dst, typename Src>
ECH_HD Dst cast_value(Src v) {
  if constexpr (std::is_same_v<Src, bfloat16> && std::is_same_v<Dst, bfloat16>) {
    return v;
  } else if constexpr (std::is_same_v<Src, bfloat16>) {
    return cast_value<Dst>(bf16_to_float(v));
  } else if constexpr (std::is_same_v<Dst, bfloat16>) {
    return bf16_from_float(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<Src> && std::is_integral_v<Dst>) {
    constexpr double kInt64Limit = 9223372036854775808.0;  // 2^63
    if (!(v == v)) return Dst(0);
    if (static_cast<double>(v) >= kInt64Limit) return static_cast<Dst>(INT64_MAX);
    if (static_cast<double>(v) < -kInt64Limit) return static_cast<Dst>(INT64_MIN);
    return static_cast<Dst>(static_cast<int64_t>(v));
  } else {
    return static_cast<Dst>(v);
  }
}

// The type an element computes in: float for bfloat16 (loaded exactly with cast_value<float>,
// the result rounded once to nearest even by cast_value<bfloat16> as it is stored: PyTorch's
// bits for its bf16 elementwise ops), else the element type itself.
template <typename T>
using compute_type = std::conditional_t<std::is_same_v<T, bfloat16>, float, T>;

}  // namespace echelon
