// cuDNN: one handle per (thread, device), bound to the given stream at each use, and the
// ECH_CUDNN_CHECK macro. Include only from library sources built with ECHELON_WITH_CUDNN (the
// cuDNN include path is private to the library target).
#pragma once

#include <cudnn.h>

#include <echelon/cuda/check.h>

namespace echelon::cuda {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                    int line);

// The calling thread's handle for `device`, set to `stream`. Handles are pooled and never
// destroyed (a thread that exits returns them), so none is torn down after the CUDA runtime.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);

}  // namespace echelon::cuda

#define ECH_CUDNN_CHECK(call)                                                     \
  do {                                                                            \
    cudnnStatus_t ech_status_ = (call);                                           \
    if (ech_status_ != CUDNN_STATUS_SUCCESS)                                      \
      ::echelon::cuda::throw_cudnn_error(ech_status_, #call, __FILE__, __LINE__); \
  } while (0)
