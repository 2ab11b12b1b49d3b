// Caching device allocator and cached pinned host allocator (see allocator.h for the contract).
//
// Why size classes: tensors of a training step repeat the same sizes every iteration, so rounding
// (small requests to 512 B, large ones to 2 MiB) turns almost every request after the first step
// into a cache hit while bounding the waste. A cached block is reused for a request of at most
// twice less than its size, so one huge freed block does not swallow small requests.
// Why per-stream free lists: a block freed by stream S may still be read by S's queued kernels;
// handing it only to later work on S keeps stream order without events.
// Why pinned blocks carry an event: an asynchronous H2D copy may still read a pinned buffer after
// its tensor died; the block becomes reusable only once the event recorded at free time completed.
#include "cuda/allocator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "cuda/check.h"
#include "cuda/stream.h"

namespace echelon::cuda {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // requests up to 1 MiB are "small"
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;
constexpr size_t kMaxRequest = size_t{1} << 56;  // beyond any device; keeps rounding overflow-free

size_t round_size(size_t nbytes) {
  const size_t unit = nbytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (nbytes + unit - 1) / unit * unit;
}

std::string mib(size_t bytes) {
  return str(static_cast<double>(bytes) / (1 << 20), " MiB");
}

struct DeviceBlock {
  size_t size;
  cudaStream_t stream;
};

struct DeviceState {
  std::unordered_map<void*, DeviceBlock> live;
  // Free blocks per stream, keyed by size for best-fit lookup.
  std::unordered_map<cudaStream_t, std::multimap<size_t, void*>> free_lists;
  AllocatorStats stats;
};

struct DeviceAllocator {
  std::mutex mutex;
  std::unordered_map<int, DeviceState> devices;
};

// Never destroyed: freeing at static-destruction time would race the CUDA runtime's own teardown.
DeviceAllocator& device_allocator() {
  static auto* allocator = new DeviceAllocator;
  return *allocator;
}

void check_device(int device, const char* op) {
  const int count = device_count();
  ECH_CHECK(device >= 0 && device < count, op, ": CUDA device ", device,
            " does not exist (this machine has ", count, ")");
}

void release_cached(int device, DeviceState& state) {
  DeviceGuard guard(device);
  for (auto& [stream, blocks] : state.free_lists) {
    for (auto& [size, ptr] : blocks) {
      cudaFree(ptr);
      state.stats.reserved_bytes -= size;
    }
  }
  state.free_lists.clear();
}

void* reuse_cached(DeviceState& state, size_t size, cudaStream_t stream) {
  const auto list = state.free_lists.find(stream);
  if (list == state.free_lists.end()) return nullptr;
  const auto it = list->second.lower_bound(size);
  if (it == list->second.end() || it->first >= 2 * size) return nullptr;
  void* ptr = it->second;
  state.live[ptr] = DeviceBlock{it->first, stream};
  list->second.erase(it);
  return ptr;
}

[[noreturn]] void throw_out_of_memory(int device, size_t nbytes, const DeviceState& state) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
  ECH_FAIL("CUDA out of memory on cuda:", device, ": tried to allocate ", nbytes, " bytes (",
           mib(nbytes), "); device has ", mib(free_bytes), " free of ", mib(total_bytes),
           "; allocator: ", state.stats.to_string());
}

}  // namespace

std::string AllocatorStats::to_string() const {
  return str("allocated ", mib(allocated_bytes), " (peak ", mib(peak_allocated_bytes),
             "), reserved ", mib(reserved_bytes), " (peak ", mib(peak_reserved_bytes), "), ",
             num_allocs, " allocs, ", num_cuda_mallocs, " cudaMalloc calls");
}

AllocatorStats allocator_stats(int device) {
  check_device(device, "allocator_stats");
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  return allocator.devices[device].stats;
}

void reset_peak_stats(int device) {
  check_device(device, "reset_peak_stats");
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  AllocatorStats& stats = allocator.devices[device].stats;
  stats.peak_allocated_bytes = stats.allocated_bytes;
  stats.peak_reserved_bytes = stats.reserved_bytes;
}

void empty_cache(int device) {
  check_device(device, "empty_cache");
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  release_cached(device, allocator.devices[device]);
}

void* device_malloc(int device, size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  check_device(device, "device_malloc");
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  if (nbytes > kMaxRequest) throw_out_of_memory(device, nbytes, state);
  const size_t size = round_size(nbytes);
  ++state.stats.num_allocs;

  void* ptr = reuse_cached(state, size, stream);
  size_t block_size = size;
  if (ptr) {
    block_size = state.live.at(ptr).size;
  } else {
    DeviceGuard guard(device);
    if (cudaMalloc(&ptr, size) != cudaSuccess) {
      cudaGetLastError();
      // Cached blocks of other sizes and streams may be exactly what the driver is missing.
      release_cached(device, state);
      if (cudaMalloc(&ptr, size) != cudaSuccess) {
        cudaGetLastError();
        throw_out_of_memory(device, nbytes, state);
      }
    }
    ++state.stats.num_cuda_mallocs;
    state.stats.reserved_bytes += size;
    state.stats.peak_reserved_bytes =
        std::max(state.stats.peak_reserved_bytes, state.stats.reserved_bytes);
    state.live[ptr] = DeviceBlock{size, stream};
  }
  state.stats.allocated_bytes += block_size;
  state.stats.peak_allocated_bytes =
      std::max(state.stats.peak_allocated_bytes, state.stats.allocated_bytes);
  return ptr;
}

void device_free(int device, void* ptr) {
  if (!ptr) return;
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  const auto it = state.live.find(ptr);
  ECH_CHECK(it != state.live.end(), "device_free: pointer ", ptr,
            " was not allocated by the caching allocator of cuda:", device);
  const DeviceBlock block = it->second;
  state.live.erase(it);
  state.stats.allocated_bytes -= block.size;
  state.free_lists[block.stream].emplace(block.size, ptr);
}

// ---- pinned host memory ----------------------------------------------------------------------
namespace {

struct PinnedBlock {
  size_t size;
  cudaEvent_t released = nullptr;  // recorded at free time on the then-current stream
};

struct PinnedAllocator {
  std::mutex mutex;
  std::unordered_map<void*, PinnedBlock> live;
  std::multimap<size_t, std::pair<void*, PinnedBlock>> free_blocks;
};

PinnedAllocator& pinned_allocator_state() {
  static auto* allocator = new PinnedAllocator;
  return *allocator;
}

bool event_done(cudaEvent_t event) {
  if (!event) return true;
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

}  // namespace

void* pinned_malloc(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  ECH_CHECK(device_count() > 0, "pinned_malloc: pinned host memory needs a CUDA device (", nbytes,
            " bytes requested)");
  ECH_CHECK(nbytes <= kMaxRequest, "pinned_malloc: absurd request of ", nbytes, " bytes");
  const size_t size = round_size(nbytes);
  auto& allocator = pinned_allocator_state();
  std::lock_guard lock(allocator.mutex);
  for (auto it = allocator.free_blocks.lower_bound(size);
       it != allocator.free_blocks.end() && it->first < 2 * size; ++it) {
    if (!event_done(it->second.second.released)) continue;
    void* ptr = it->second.first;
    allocator.live[ptr] = it->second.second;
    allocator.free_blocks.erase(it);
    return ptr;
  }
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, size, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    ECH_FAIL("pinned_malloc: cudaHostAlloc of ", nbytes, " bytes (", mib(nbytes), ") failed");
  }
  allocator.live[ptr] = PinnedBlock{size, nullptr};
  return ptr;
}

void pinned_free(void* ptr) {
  if (!ptr) return;
  auto& allocator = pinned_allocator_state();
  std::lock_guard lock(allocator.mutex);
  const auto it = allocator.live.find(ptr);
  ECH_CHECK(it != allocator.live.end(), "pinned_free: pointer ", ptr,
            " was not allocated by pinned_malloc");
  PinnedBlock block = it->second;
  allocator.live.erase(it);
  if (!block.released)
    ECH_CUDA_CHECK(cudaEventCreateWithFlags(&block.released, cudaEventDisableTiming));
  ECH_CUDA_CHECK(cudaEventRecord(block.released, current_stream()));
  allocator.free_blocks.emplace(block.size, std::make_pair(ptr, block));
}

}  // namespace echelon::cuda
