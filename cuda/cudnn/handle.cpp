// cuDNN handles: a process-wide pool per device, leased to threads for their lifetime.
#if ECHELON_WITH_CUDNN
#include <echelon/cuda/cudnn/handle.h>

#include <map>
#include <mutex>
#include <vector>

#include <echelon/cuda/stream.h>

namespace echelon::cuda {

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  ::echelon::detail::throw_error(
      file, line, str("cuDNN call failed: ", call, ": ", cudnnGetErrorString(status)));
}

namespace {

std::mutex pool_mutex;
std::map<int, std::vector<cudnnHandle_t>>& free_handles() {
  static auto* pool = new std::map<int, std::vector<cudnnHandle_t>>();  // never destroyed
  return *pool;
}

// Returns this thread's handles to the pool when the thread exits.
struct ThreadHandles {
  std::map<int, cudnnHandle_t> by_device;
  ~ThreadHandles() {
    std::lock_guard<std::mutex> lock(pool_mutex);
    for (auto& [device, handle] : by_device) free_handles()[device].push_back(handle);
  }
};

}  // namespace

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  thread_local ThreadHandles mine;
  auto it = mine.by_device.find(device);
  if (it == mine.by_device.end()) {
    cudnnHandle_t handle = nullptr;
    {
      std::lock_guard<std::mutex> lock(pool_mutex);
      auto& pool = free_handles()[device];
      if (!pool.empty()) {
        handle = pool.back();
        pool.pop_back();
      }
    }
    if (!handle) {
      DeviceGuard guard(device);
      ECH_CUDNN_CHECK(cudnnCreate(&handle));
    }
    it = mine.by_device.emplace(device, handle).first;
  }
  ECH_CUDNN_CHECK(cudnnSetStream(it->second, stream));
  return it->second;
}

}  // namespace echelon::cuda
#endif  // ECHELON_WITH_CUDNN
