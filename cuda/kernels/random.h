// Launchers of cuda/kernels/random.cu: same names and arguments as tensor/cpu/random.h, plus the
// stream; one thread per element computes philox_uniform / philox_normal / philox_bernoulli
// (kernels/philox.h). float only. randperm has no CUDA twin.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/philox.h>

namespace echelon::cuda {

template <typename T>
void uniform(T* out, int64_t n, PhiloxState state, cudaStream_t stream);

template <typename T>
void normal(T* out, int64_t n, PhiloxState state, cudaStream_t stream);

template <typename T>
void bernoulli(T* out, int64_t n, double p, PhiloxState state, cudaStream_t stream);

}  // namespace echelon::cuda
