// Turns a failed CUDA runtime call into an echelon::Error. The message carries the call (or the
// op name for kernel launches), the runtime's error name and description, and file:line, so a
// user sees "relu: cudaErrorInvalidConfiguration (invalid configuration argument)" instead of a
// bare code.
#include <echelon/cuda/check.h>

#include <cstring>
#include <string>

#include <echelon/cuda/switches.h>

namespace echelon::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // A sticky error would otherwise be reported again by the next unrelated check; clearing the
  // non-sticky "last error" keeps later messages about their own calls.
  cudaGetLastError();
  const char* slash = std::strrchr(file, '/');
  throw Error(
      str("CUDA error in ", call, ": ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ")"),
      str(slash ? slash + 1 : file, ":", line));
}

bool read_sync_launches_env() {
  return switches::sync_launches();
}

bool read_launch_environment() {
  switches::check_all();
  return switches::sync_launches();
}

void sync_after_launch(const char* op, const char* file, int line) {
  // The whole device, not one stream: the macro does not know the stream, and in this debugging
  // mode every earlier launch was already waited for, so a failure here belongs to `op` (or to a
  // launch another thread made since).
  const cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) return;
  const std::string what = str(op,
                               " (failed while running, seen by ECHELON_SYNC_LAUNCHES=1; a fault "
                               "inside a kernel leaves the CUDA context unusable)");
  throw_cuda_error(err, what.c_str(), file, line);
}

}  // namespace echelon::cuda
