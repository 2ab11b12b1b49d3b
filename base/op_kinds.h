// Enumerations shared by the CPU twins (tensor/cpu) and the CUDA kernels (cuda/kernels): the
// lowest floor both can see. Keep the lists in sync with the switch statements in both backends.
#pragma once

#include <cstdint>

namespace echelon {

enum class UnaryOp : uint8_t { Neg, Abs, Exp, Log, Sqrt, Relu, Tanh, Sigmoid, Square, Reciprocal };
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Max, Min, Pow };
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
enum class PoolKind : uint8_t { Max, Avg };

const char* name(UnaryOp op);
const char* name(BinaryOp op);
const char* name(ReduceOp op);

// Host+device annotation for small helpers compiled by both g++ and nvcc.
#if defined(__CUDACC__)
#define ECH_HD __host__ __device__ __forceinline__
#else
#define ECH_HD inline
#endif

}  // namespace echelon
