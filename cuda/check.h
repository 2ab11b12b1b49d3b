// One error-macro family for CUDA, cuBLAS and cuDNN: a failed call throws echelon::Error
// naming the call (the op), the library's error string and file:line. Never exit() or abort().
#pragma once

#include <cuda_runtime.h>

#include <echelon/base/error.h>

namespace echelon::cuda {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
}  // namespace echelon::cuda

#define ECH_CUDA_CHECK(call)                                                  \
  do {                                                                        \
    cudaError_t ech_err_ = (call);                                            \
    if (ech_err_ != cudaSuccess)                                              \
      ::echelon::cuda::throw_cuda_error(ech_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site, named by `op`.
#define ECH_CUDA_CHECK_LAUNCH(op) ECH_CUDA_CHECK_NAMED(cudaGetLastError(), op)
#define ECH_CUDA_CHECK_NAMED(call, op)                                     \
  do {                                                                     \
    cudaError_t ech_err_ = (call);                                         \
    if (ech_err_ != cudaSuccess)                                           \
      ::echelon::cuda::throw_cuda_error(ech_err_, op, __FILE__, __LINE__); \
  } while (0)
// The cuBLAS and cuDNN variants live next to their handles (cuda/blas.h, cuda/cudnn/handle.h) so
// that this header needs only the runtime; an NCCL wrapper, when one is written, does the same.
