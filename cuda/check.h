// One error-macro family for CUDA, cuBLAS and cuDNN: a failed call throws echelon::Error
// naming the call (the op), the library's error string and file:line. Never exit() or abort().
#pragma once

#include <atomic>

#include <cuda_runtime.h>

#include <echelon/base/error.h>

namespace echelon::cuda {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

// ECHELON_SYNC_LAUNCHES=1: read once, at the first launch (the environment of a running process
// is not expected to change; a test can flip it with set_sync_launches).
bool read_sync_launches_env();
// The first launch's reading: every switch of the CUDA layer checked (cuda/switches.h, a bad
// value throws), then ECHELON_SYNC_LAUNCHES.
bool read_launch_environment();
inline std::atomic<bool>& sync_launches_flag() {
  static std::atomic<bool> flag{read_launch_environment()};
  return flag;
}
inline bool sync_launches() {
  return sync_launches_flag().load(std::memory_order_relaxed);
}
inline void set_sync_launches(bool on) {
  sync_launches_flag().store(on, std::memory_order_relaxed);
}
// Waits for the device and throws naming `op` when the kernel (or anything queued before it)
// failed. Sticky errors (illegal address) leave the context unusable; the message says so.
void sync_after_launch(const char* op, const char* file, int line);
}  // namespace echelon::cuda

#define ECH_CUDA_CHECK(call)                                                  \
  do {                                                                        \
    cudaError_t ech_err_ = (call);                                            \
    if (ech_err_ != cudaSuccess)                                              \
      ::echelon::cuda::throw_cuda_error(ech_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: catches bad launch configurations at the launch site, named by `op`.
// With ECHELON_SYNC_LAUNCHES=1 in the environment it also waits for the device after every
// launch, so a fault inside the kernel (illegal address, trap) is reported against `op` instead
// of surfacing at some later, unrelated call. Off, it costs one predictable branch.
#define ECH_CUDA_CHECK_LAUNCH(op)                                 \
  do {                                                            \
    ECH_CUDA_CHECK_NAMED(cudaGetLastError(), op);                 \
    if (::echelon::cuda::sync_launches())                         \
      ::echelon::cuda::sync_after_launch(op, __FILE__, __LINE__); \
  } while (0)
#define ECH_CUDA_CHECK_NAMED(call, op)                                     \
  do {                                                                     \
    cudaError_t ech_err_ = (call);                                         \
    if (ech_err_ != cudaSuccess)                                           \
      ::echelon::cuda::throw_cuda_error(ech_err_, op, __FILE__, __LINE__); \
  } while (0)
// The cuBLAS and cuDNN variants live next to their handles (cuda/blas.h, cuda/cudnn/handle.h) so
// that this header needs only the runtime; an NCCL wrapper, when one is written, does the same.
