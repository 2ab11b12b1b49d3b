// CUDA emulation build (ECHELON_CUDA_SIM): stands in for <cuda_pipeline.h> in the subset
// Echelon's kernels use: the cp.async primitives, modelled in cuda/sim/scheduler.cpp (a copy's
// destination is NaN from the copy until the wait that lands it; see async_copy in
// cuda/sim/device.h), so a kernel that reads a stage before waiting for it reads NaN.
#pragma once

#include <cstddef>

#include <echelon/cuda/sim/device.h>

inline void __pipeline_memcpy_async(void* dst_shared, const void* src_global, size_t size_and_align,
                                    size_t zfill = 0, const char* file = __builtin_FILE(),
                                    int line = __builtin_LINE()) {
  echelon::cudasim::detail::async_copy(dst_shared, src_global, size_and_align, zfill, file, line);
}
inline void __pipeline_commit() {
  echelon::cudasim::detail::async_commit();
}
inline void __pipeline_wait_prior(size_t prior) {
  echelon::cudasim::detail::async_wait_prior(prior);
}
