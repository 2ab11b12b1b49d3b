// The one launch helper: a 1-D grid-stride launch over n elements on a stream, checked.
//   launch_1d("relu", n, stream, relu_kernel, x, y, n);
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/cuda/check.h>

namespace echelon::cuda {

inline constexpr int kBlock = 256;

inline unsigned grid_for(int64_t n, int block = kBlock) {
  // Grid-stride loops cover any n; cap the grid so huge n does not overflow gridDim.x.
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65535LL * 8));
}

#if defined(__CUDACC__)
// Grid-stride loop bounds: for (int64_t i = grid_start(); i < n; i += grid_step()). 64-bit, so
// tensors past 2^31 elements index correctly.
__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}
#endif

template <typename Kernel, typename... Args>
void launch_1d(const char* op, int64_t n, cudaStream_t stream, Kernel kernel, Args... args) {
  if (n <= 0) return;
  kernel<<<grid_for(n), kBlock, 0, stream>>>(args...);
  ECH_CUDA_CHECK_LAUNCH(op);
}

}  // namespace echelon::cuda
