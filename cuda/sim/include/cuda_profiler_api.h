// CUDA emulation build (ECHELON_CUDA_SIM): stands in for <cuda_profiler_api.h>. No profiler can
// attach to the emulator, so starting and stopping its collection does nothing and succeeds,
// as the real calls do when no profiler is attached (bench/exp_gpu_profile.cpp marks its
// ranges with them).
#pragma once

#include <cuda_runtime.h>

inline cudaError_t cudaProfilerStart() {
  return cudaSuccess;
}
inline cudaError_t cudaProfilerStop() {
  return cudaSuccess;
}
