// Element types. float32 is the compute type; float64 exists for CPU references and gradcheck;
// integers carry labels and indices; uint8 carries raw image bytes; bfloat16 is mostly storage
// (cast, copy, move between devices and processes, safetensors); of the ops only relu, its
// backward and add compute on it (in float, rounded when stored: tensor/ops_elementwise.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <echelon/base/error.h>
#include <echelon/kernels/bf16.h>

namespace echelon {

enum class DType : uint8_t { Float32, Float64, Int32, Int64, UInt8, BFloat16 };

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kBFloat16 = DType::BFloat16;

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", ...
DType parse_dtype(const std::string& text);
// The dtypes ops compute in (bfloat16 is a floating format, but mostly stored and converted).
inline bool is_floating(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64;
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return kFloat64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return kInt64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return kUInt8;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return kBFloat16;
}
// The end of an op's "not supported" error: for bfloat16, what to do instead.
inline const char* dtype_hint(DType dtype) {
  return dtype == DType::BFloat16
             ? " (bfloat16 computes only in relu, relu's backward and add so far: cast to float32 "
               "for this op)"
             : "";
}

}  // namespace echelon

// Calls BODY with `scalar_t` bound to the C++ type of DTYPE; OP names the caller in the error.
#define ECH_DISPATCH_CASE(DT, T, ...) \
  case DT: {                          \
    using scalar_t = T;               \
    __VA_ARGS__;                      \
    break;                            \
  }
#define ECH_DISPATCH_FLOATING(DTYPE, OP, ...)                                             \
  switch (DTYPE) {                                                                        \
    ECH_DISPATCH_CASE(::echelon::kFloat32, float, __VA_ARGS__)                            \
    ECH_DISPATCH_CASE(::echelon::kFloat64, double, __VA_ARGS__)                           \
    default:                                                                              \
      ECH_FAIL(OP, ": dtype ", ::echelon::dtype_name(DTYPE),                              \
               " is not supported (float32/float64 only)", ::echelon::dtype_hint(DTYPE)); \
  }
#define ECH_DISPATCH_ALL(DTYPE, OP, ...)                                          \
  switch (DTYPE) {                                                                \
    ECH_DISPATCH_CASE(::echelon::kFloat32, float, __VA_ARGS__)                    \
    ECH_DISPATCH_CASE(::echelon::kFloat64, double, __VA_ARGS__)                   \
    ECH_DISPATCH_CASE(::echelon::kInt32, int32_t, __VA_ARGS__)                    \
    ECH_DISPATCH_CASE(::echelon::kInt64, int64_t, __VA_ARGS__)                    \
    ECH_DISPATCH_CASE(::echelon::kUInt8, uint8_t, __VA_ARGS__)                    \
    default:                                                                      \
      ECH_FAIL(OP, ": dtype ", ::echelon::dtype_name(DTYPE), " is not supported", \
               ::echelon::dtype_hint(DTYPE));                                     \
  }
