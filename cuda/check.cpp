// Turns a failed CUDA runtime call into an echelon::Error. The message carries the call (or the
// op name for kernel launches), the runtime's error name and description, and file:line, so a
// user sees "relu: cudaErrorInvalidConfiguration (invalid configuration argument)" instead of a
// bare code.
#include <echelon/cuda/check.h>

#include <cstring>

namespace echelon::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // A sticky error would otherwise be reported again by the next unrelated check; clearing the
  // non-sticky "last error" keeps later messages about their own calls.
  cudaGetLastError();
  const char* slash = std::strrchr(file, '/');
  throw Error(str("CUDA error in ", call, ": ", cudaGetErrorName(err), " (",
                  cudaGetErrorString(err), ")"),
              str(slash ? slash + 1 : file, ":", line));
}

}  // namespace echelon::cuda
