// cuBLAS handle pool. cublasCreate is slow (it allocates device workspace), so a thread keeps its
// handle per device; when the thread exits the handles go back to a process-wide pool rather
// than being destroyed, because the last destruction would run after the runtime's teardown.
#include <echelon/cuda/blas.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <echelon/cuda/stream.h>

namespace echelon::cuda {

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  throw Error(str("cuBLAS error in ", call, ": ", cublasGetStatusName(status), " (",
                  cublasGetStatusString(status), ")"),
              str(slash ? slash + 1 : file, ":", line));
}

namespace {

struct HandlePool {
  std::mutex mutex;
  std::unordered_map<int, std::vector<cublasHandle_t>> idle;  // per device
};

HandlePool& handle_pool() {
  static auto* pool = new HandlePool;
  return *pool;
}

// The thread's handles; returned to the pool when the thread ends.
struct ThreadHandles {
  std::unordered_map<int, cublasHandle_t> by_device;
  ~ThreadHandles() {
    auto& pool = handle_pool();
    std::lock_guard lock(pool.mutex);
    for (auto& [device, handle] : by_device) pool.idle[device].push_back(handle);
  }
};

cublasHandle_t acquire(int device) {
  {
    auto& pool = handle_pool();
    std::lock_guard lock(pool.mutex);
    auto& idle = pool.idle[device];
    if (!idle.empty()) {
      cublasHandle_t handle = idle.back();
      idle.pop_back();
      return handle;
    }
  }
  DeviceGuard guard(device);
  cublasHandle_t handle = nullptr;
  ECH_CUBLAS_CHECK(cublasCreate(&handle));
  return handle;
}

}  // namespace

cublasHandle_t cublas_handle(int device) {
  if (device < 0) device = current_device();
  thread_local ThreadHandles handles;
  auto it = handles.by_device.find(device);
  if (it == handles.by_device.end()) it = handles.by_device.emplace(device, acquire(device)).first;
  ECH_CUBLAS_CHECK(cublasSetStream(it->second, current_stream(device)));
  return it->second;
}

}  // namespace echelon::cuda
