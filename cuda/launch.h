// The one launch helper: a 1-D grid-stride launch over n elements on a stream, checked.
//   launch_1d("relu", n, stream, relu_kernel, x, y, n);
// Every other launch goes through ECH_LAUNCH instead of <<<>>>, so that the emulation build
// (ECHELON_CUDA_SIM, cuda/sim/) runs the same source on the CPU:
//   ECH_LAUNCH(grid, block, smem, stream, kernel<T>)(args...);   // kernel last: it may hold commas
// Dynamic shared memory: ECH_DYNAMIC_SHARED(float, tile); declares `float* tile` (16-byte
// aligned; ECH_DYNAMIC_SHARED_ALIGNED(T, name, 128) for more). Past 48 KiB a launch needs the
// kernel's opt-in: opt_in_dynamic_shared<kernel>(bytes) below.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/cuda/check.h>

#if ECHELON_CUDA_SIM
#include <echelon/cuda/sim/launch.h>
#define ECH_LAUNCH_NAMED(name, grid, block, smem, stream, ...) \
  ::echelon::cudasim::Launch(name, __FILE__, __LINE__, grid, block, smem, stream, __VA_ARGS__)
#define ECH_DYNAMIC_SHARED_ALIGNED(T, name, align) \
  T* const name = static_cast<T*>(::echelon::cudasim::detail::dynamic_shared())
#else
#define ECH_LAUNCH_NAMED(name, grid, block, smem, stream, ...) \
  __VA_ARGS__<<<grid, block, smem, stream>>>
#define ECH_DYNAMIC_SHARED_ALIGNED(T, name, align) \
  extern __shared__ __align__(align)               \
  unsigned char ech_smem_##name[];                 \
  T* const name = reinterpret_cast<T*>(ech_smem_##name)
#endif
// The emulation's dynamic shared memory is 128-byte aligned (cuda/sim/scheduler.cpp).
#define ECH_DYNAMIC_SHARED(T, name) ECH_DYNAMIC_SHARED_ALIGNED(T, name, 16)
#define ECH_LAUNCH(grid, block, smem, stream, ...) \
  ECH_LAUNCH_NAMED(#__VA_ARGS__, grid, block, smem, stream, __VA_ARGS__)

// `float v[8] ECH_SIM_ZEROED;` value-initialises a register array in the emulation build only:
// gcc 12 cannot tell that a kernel reads only the elements its predicate loaded
// (-Wmaybe-uninitialized); the device code keeps no zeroing instructions.
#if ECHELON_CUDA_SIM
#define ECH_SIM_ZEROED = {}
#else
#define ECH_SIM_ZEROED
#endif

namespace echelon::cuda {

inline constexpr int kBlock = 256;

// Grid-stride kernels cap their grids here. The emulation can lower the cap
// (ECHELON_CUDASIM_GRID_CAP) so that tests make every block loop over several items.
inline unsigned max_grid_blocks() {
#if ECHELON_CUDA_SIM
  return cudasim::grid_cap(65535u * 8);
#else
  return 65535u * 8;
#endif
}

inline unsigned grid_for(int64_t n, int block = kBlock) {
  // Grid-stride loops cover any n; cap the grid so huge n does not overflow gridDim.x.
  const int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, max_grid_blocks()));
}

#if defined(__CUDACC__) || ECHELON_CUDA_SIM
// Grid-stride loop bounds: for (int64_t i = grid_start(); i < n; i += grid_step()). 64-bit, so
// tensors past 2^31 elements index correctly.
__device__ __forceinline__ int64_t grid_start() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_step() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}
#endif

// Lets `Kernel` launch with up to `bytes` of dynamic shared memory, past the 48 KiB default
// (cudaFuncSetAttribute's opt-in; the driver refuses more than the device's per-block opt-in
// limit, 227 KiB on an H200). The attribute belongs to the device's context: set once per device
// and kernel. Thread-safe (a race only repeats the idempotent call). Not a stream operation;
// whether the driver allows it during stream capture is unverified here, and moot for the
// training graphs, whose eager warm-up steps launch every kernel first (--cuda-graph).
template <auto Kernel>
void opt_in_dynamic_shared(size_t bytes) {
  static std::atomic<uint64_t> done{0};  // bit d: device d opted in
  int device = 0;
  ECH_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device >= 0 && device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (done.load(std::memory_order_acquire) & bit) != 0) return;
  ECH_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  done.fetch_or(bit, std::memory_order_release);
}

template <typename Kernel, typename... Args>
void launch_1d(const char* op, int64_t n, cudaStream_t stream, Kernel kernel, Args... args) {
  if (n <= 0) return;
  ECH_LAUNCH_NAMED(op, grid_for(n), kBlock, 0, stream, kernel)(args...);
  ECH_CUDA_CHECK_LAUNCH(op);
}

}  // namespace echelon::cuda
