// CUDA emulation: a kernel launch's checks before it is queued (the driver's configuration
// limits, dynamic shared memory against the kernel's opt-in, host pointers among the arguments)
// and cudaFuncSetAttribute's opt-in; scheduler.cpp runs the grid.
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <echelon/cuda/sim/device.h>
#include <echelon/cuda/sim/internal.h>

namespace echelon::cudasim {
namespace detail {

namespace {

// The driver's per-block shared-memory limits (compute capability 9.0, an H200): the default for
// a launch's dynamic shared memory, and the most cudaFuncSetAttribute may raise it to
// (cudaDevAttrMaxSharedMemoryPerBlockOptin, 227 KiB).
constexpr size_t kDefaultDynamicShared = 48 * 1024, kMaxSharedPerBlockOptin = 232448;

// Each (device, kernel)'s cudaFuncAttributeMaxDynamicSharedMemorySize, where it was set.
struct SharedOptIns {
  std::mutex mutex;
  std::map<std::pair<int, const void*>, size_t> bytes;
};
SharedOptIns& shared_opt_ins() {
  static SharedOptIns opt_ins;
  return opt_ins;
}

size_t dynamic_shared_limit(const void* func) {
  SharedOptIns& o = shared_opt_ins();
  std::lock_guard<std::mutex> lock(o.mutex);
  const auto it = o.bytes.find({current_device(), func});
  return it == o.bytes.end() ? kDefaultDynamicShared : it->second;
}

}  // namespace

void launch(const char* kernel, const void* func, const char* file, int line, dim3 grid, dim3 block,
            size_t dynamic_smem, cudaStream_t stream, std::vector<PointerArg> pointers,
            std::function<void()> body) {
  // The driver's limits (compute capability 9.0): these fail the launch, not the context.
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0 ||
      block.x > 1024 || block.y > 1024 || block.z > 64 || threads > 1024 || grid.x > 2147483647u ||
      grid.y > 65535 || grid.z > 65535) {
    result(cudaErrorInvalidConfiguration);
    return;
  }
  // 48 KiB, or as far as the kernel opted in (cudaFuncSetAttribute) on this device.
  if (dynamic_smem > dynamic_shared_limit(func)) {
    result(cudaErrorInvalidValue);
    return;
  }
  for (const PointerArg& p : pointers) {
    if (p.ptr && where(p.ptr) == Where::Host) {
      std::ostringstream out;
      out << "kernel " << kernel << " (launched at " << site(file, line) << "): argument "
          << p.index << " = " << p.ptr
          << " is host memory (not from cudaMalloc or cudaHostAlloc): a GPU would fault on it";
      fail(cudaErrorIllegalAddress, out.str());
      result(cudaSuccess);
      return;
    }
  }
  Grid g{kernel,           file,           line, grid, block, dynamic_smem, launch_order(),
         next_launch_id(), std::move(body)};
  result(enqueue(stream, [g = std::move(g)] { run_grid(g); }));
}

}  // namespace detail
}  // namespace echelon::cudasim

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  using namespace echelon::cudasim::detail;
  if (func == nullptr || attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kMaxSharedPerBlockOptin)
    return result(cudaErrorInvalidValue);
  SharedOptIns& o = shared_opt_ins();
  std::lock_guard<std::mutex> lock(o.mutex);
  o.bytes[{current_device(), func}] = static_cast<size_t>(value);
  return result(cudaSuccess);
}
