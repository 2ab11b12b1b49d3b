// Enumerations shared by the CPU twins (tensor/cpu) and the CUDA kernels (cuda/kernels): the
// lowest floor both can see. Keep the lists in sync with the switch statements in both backends.
#pragma once

#include <cstdint>

namespace echelon {

enum class UnaryOp : uint8_t { Neg, Abs, Exp, Log, Sqrt, Relu, Tanh, Sigmoid, Square, Reciprocal };
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Max, Min, Pow };
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
enum class PoolKind : uint8_t { Max, Avg };
// How float32 GEMMs and convolutions may round on a GPU (`--precision`): Fp32 multiplies in
// fp32; Tf32 rounds the inputs of each product to TF32 (10 mantissa bits) for the tensor cores
// and accumulates in fp32; Bf16 rounds them to bfloat16 (7 mantissa bits, to nearest even) and
// accumulates in fp32 (storage stays fp32). CPU kernels always compute in fp32.
enum class Precision : uint8_t { Fp32, Tf32, Bf16 };

const char* name(UnaryOp op);
const char* name(BinaryOp op);
const char* name(ReduceOp op);
const char* name(Precision precision);  // "fp32", "tf32", "bf16"

// Host+device annotation for small helpers compiled by both g++ and nvcc.
#if defined(__CUDACC__)
#define ECH_HD __host__ __device__ __forceinline__
#else
#define ECH_HD inline
#endif

}  // namespace echelon
