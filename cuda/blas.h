// cuBLAS: one handle per (thread, device), bound to the thread's current stream at each use, and
// the ECH_CUBLAS_CHECK macro. Handles are pooled and never destroyed: a thread that exits returns
// its handles for the next thread, and none is torn down after the CUDA runtime at process exit.
#pragma once

#include <cublas_v2.h>

#include <echelon/cuda/check.h>

namespace echelon::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

// The calling thread's handle for `device` (-1: current), set to current_stream(device).
cublasHandle_t cublas_handle(int device = -1);

}  // namespace echelon::cuda

#define ECH_CUBLAS_CHECK(call)                                                     \
  do {                                                                             \
    cublasStatus_t ech_status_ = (call);                                           \
    if (ech_status_ != CUBLAS_STATUS_SUCCESS)                                      \
      ::echelon::cuda::throw_cublas_error(ech_status_, #call, __FILE__, __LINE__); \
  } while (0)
