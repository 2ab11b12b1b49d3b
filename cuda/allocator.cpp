// Caching device allocator and cached pinned host allocator (see allocator.h for the contract).
//
// Why size classes: tensors of a training step repeat the same sizes every iteration, so rounding
// (small requests to 512 B, large ones to 2 MiB) turns almost every request after the first step
// into a cache hit while bounding the waste. A cached block is reused for a request of at most
// twice less than its size, so one huge freed block does not swallow small requests.
// Why per-stream free lists: a block freed by stream S may still be read by S's queued kernels;
// handing it only to later work on S keeps stream order without events.
// Why events for other streams: a tensor allocated on stream S (the loader's copy stream, a
// pipeline stage's stream) may be read on stream R by another thread. When it dies, R's kernels
// may still be queued; handing the block back to S at once would let S overwrite memory R still
// reads. Such blocks wait in `pending` until an event recorded on each user stream completed.
// Why release_stream: a destroyed stream's handle can be recycled for a new stream, which must
// not inherit blocks that the old stream's still-running work touches; the stream is
// synchronized first, after which its blocks are safe for any stream.
// Why private pools for captures: a CUDA graph replays the captured kernels on the captured
// addresses. A block the capture used must therefore not serve eager work while the graph lives;
// it is kept in the graph's pool, reused only by that capture, and handed back when the graph is
// destroyed. Blocks freed during capture (even ones allocated before it) join the pool: captured
// kernels may have read them, and no event can be recorded on a capturing stream to track that.
// Why pinned blocks carry events: an asynchronous copy may still read (or write) a pinned buffer
// after its tensor died; the block becomes reusable once the events recorded at copy time
// completed (recorded on the copy's own stream, not on whatever stream is current at free time).
#include <echelon/cuda/allocator.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>

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

// Never passed to CUDA: the free list of blocks that every stream may take (their stream died).
const cudaStream_t kAnyStream = reinterpret_cast<cudaStream_t>(~uintptr_t{0});

struct DeviceBlock {
  size_t size;
  cudaStream_t stream;                // allocation stream (kAnyStream once it was released)
  std::vector<cudaStream_t> used_on;  // other streams that use it (record_stream)
  uint64_t pool = 0;                  // the capture pool that owns it; 0: the general cache
};

struct CapturePool {
  cudaStream_t stream;
  std::multimap<size_t, void*> free_blocks;
  size_t blocks = 0;  // owned, free or live
};

// Freed, but reusable on `stream` only once every event completed.
struct PendingBlock {
  void* ptr;
  size_t size;
  cudaStream_t stream;
  std::vector<cudaEvent_t> events;
};

struct DeviceState {
  std::unordered_map<void*, DeviceBlock> live;
  // Free blocks per stream, keyed by size for best-fit lookup.
  std::unordered_map<cudaStream_t, std::multimap<size_t, void*>> free_lists;
  std::vector<PendingBlock> pending;
  std::vector<cudaEvent_t> idle_events;   // of this device, for reuse
  std::map<uint64_t, CapturePool> pools;  // live capture pools by id
  uint64_t capturing = 0;                 // the pool being captured into, 0: none
  uint64_t next_pool = 1;
  AllocatorStats stats;
};

// Makes `device` current for a scope without ever throwing (used on destructor paths).
class QuietDeviceGuard {
 public:
  explicit QuietDeviceGuard(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device_ && cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
  }
  ~QuietDeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  QuietDeviceGuard(const QuietDeviceGuard&) = delete;
  QuietDeviceGuard& operator=(const QuietDeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = -1;
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

// An event recorded on `stream` (the block's device must be current), or nullptr when recording
// failed, in which case the stream has been synchronized instead.
cudaEvent_t record_on(DeviceState& state, cudaStream_t stream) {
  cudaEvent_t event = nullptr;
  if (!state.idle_events.empty()) {
    event = state.idle_events.back();
    state.idle_events.pop_back();
  } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    event = nullptr;
  }
  if (event && cudaEventRecord(event, stream) == cudaSuccess) return event;
  cudaGetLastError();
  if (event) state.idle_events.push_back(event);
  if (cudaStreamSynchronize(stream) != cudaSuccess) cudaGetLastError();
  return nullptr;
}

bool all_done(const std::vector<cudaEvent_t>& events) {
  for (cudaEvent_t event : events) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) continue;
    if (status != cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  return true;
}

// Moves pending blocks whose events all completed to their stream's free list.
void collect_pending(DeviceState& state) {
  auto& pending = state.pending;
  for (size_t i = 0; i < pending.size();) {
    if (!all_done(pending[i].events)) {
      ++i;
      continue;
    }
    PendingBlock& block = pending[i];
    state.idle_events.insert(state.idle_events.end(), block.events.begin(), block.events.end());
    state.free_lists[block.stream].emplace(block.size, block.ptr);
    if (i + 1 != pending.size()) block = std::move(pending.back());
    pending.pop_back();
  }
}

void release_cached(int device, DeviceState& state) {
  DeviceGuard guard(device);
  for (PendingBlock& block : state.pending) {
    for (cudaEvent_t event : block.events) {
      cudaEventSynchronize(event);
      state.idle_events.push_back(event);
    }
    cudaFree(block.ptr);
    state.stats.reserved_bytes -= block.size;
  }
  state.pending.clear();
  for (auto& [stream, blocks] : state.free_lists) {
    for (auto& [size, ptr] : blocks) {
      cudaFree(ptr);
      state.stats.reserved_bytes -= size;
    }
  }
  state.free_lists.clear();
}

void* reuse_from(DeviceState& state, cudaStream_t list_stream, size_t size, cudaStream_t stream) {
  const auto list = state.free_lists.find(list_stream);
  if (list == state.free_lists.end()) return nullptr;
  const auto it = list->second.lower_bound(size);
  if (it == list->second.end() || it->first >= 2 * size) return nullptr;
  void* ptr = it->second;
  state.live[ptr] = DeviceBlock{it->first, stream, {}};
  list->second.erase(it);
  return ptr;
}

void* reuse_cached(DeviceState& state, size_t size, cudaStream_t stream) {
  if (!state.pending.empty()) collect_pending(state);
  void* ptr = reuse_from(state, stream, size, stream);
  return ptr ? ptr : reuse_from(state, kAnyStream, size, stream);
}

// cudaMalloc in relaxed capture mode: while this thread captures a graph (global or thread-local
// mode), a plain cudaMalloc would invalidate the capture; allocating is safe, so it is allowed.
cudaError_t malloc_relaxed(void** ptr, size_t size) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) return cudaMalloc(ptr, size);
  const cudaError_t err = cudaMalloc(ptr, size);
  cudaThreadExchangeStreamCaptureMode(&mode);
  return err;
}

// A block for a capture on the pool's stream: best fit from the pool, else a new one.
void* pool_malloc(DeviceState& state, uint64_t id, size_t size) {
  CapturePool& pool = state.pools.at(id);
  const auto it = pool.free_blocks.lower_bound(size);
  if (it != pool.free_blocks.end() && it->first < 2 * size) {
    void* ptr = it->second;
    state.live[ptr] = DeviceBlock{it->first, pool.stream, {}, id};
    pool.free_blocks.erase(it);
    return ptr;
  }
  return nullptr;
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

  const uint64_t pool =
      state.capturing && state.pools.at(state.capturing).stream == stream ? state.capturing : 0;
  void* ptr = pool ? pool_malloc(state, pool, size) : reuse_cached(state, size, stream);
  size_t block_size = size;
  if (ptr) {
    block_size = state.live.at(ptr).size;
#if ECHELON_CUDA_SIM
    // The emulator NaN-fills what cudaMalloc returns, so that a kernel reading what nobody wrote
    // reads NaN; a cached block would hand it the previous tensor's values instead. Refilled in
    // stream order (not during a capture: the graph would gain a node the GPU build lacks).
    if (!state.capturing) {
      DeviceGuard guard(device);
      ECH_CUDA_CHECK(cudaMemsetAsync(ptr, 0xFF, block_size, stream));
    }
#endif
  } else {
    DeviceGuard guard(device);
    if (const cudaError_t err = malloc_relaxed(&ptr, size); err != cudaSuccess) {
      cudaGetLastError();
      ECH_CHECK(err == cudaErrorMemoryAllocation, "device_malloc of ", nbytes,
                " bytes on cuda:", device, ": cudaMalloc failed: ", cudaGetErrorName(err), " (",
                cudaGetErrorString(err), ")");
      // Cached blocks of other sizes and streams may be exactly what the driver is missing (but
      // cudaFree would break a capture under way).
      if (!state.capturing) release_cached(device, state);
      if (state.capturing || cudaMalloc(&ptr, size) != cudaSuccess) {
        cudaGetLastError();
        throw_out_of_memory(device, nbytes, state);
      }
    }
    ++state.stats.num_cuda_mallocs;
    state.stats.reserved_bytes += size;
    state.stats.peak_reserved_bytes =
        std::max(state.stats.peak_reserved_bytes, state.stats.reserved_bytes);
    state.live[ptr] = DeviceBlock{size, stream, {}, pool};
    if (pool) ++state.pools.at(pool).blocks;
  }
  state.stats.allocated_bytes += block_size;
  state.stats.peak_allocated_bytes =
      std::max(state.stats.peak_allocated_bytes, state.stats.allocated_bytes);
  return ptr;
}

void device_free(int device, void* ptr) {
  device_free(device, ptr, kAnyStream);
}

void device_free(int device, void* ptr, cudaStream_t last_stream) {
  if (!ptr) return;
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  const auto it = state.live.find(ptr);
  ECH_CHECK(it != state.live.end(), "device_free: pointer ", ptr,
            " was not allocated by the caching allocator of cuda:", device);
  DeviceBlock block = std::move(it->second);
  state.live.erase(it);
  state.stats.allocated_bytes -= block.size;
  const auto owner = state.pools.find(block.pool);
  if (owner != state.pools.end() || state.capturing) {
    CapturePool& pool =
        owner != state.pools.end() ? owner->second : state.pools.at(state.capturing);
    if (owner == state.pools.end()) ++pool.blocks;  // adopted from the general cache
    pool.free_blocks.emplace(block.size, ptr);
    return;
  }
  if (last_stream != kAnyStream && last_stream != block.stream &&
      std::find(block.used_on.begin(), block.used_on.end(), last_stream) == block.used_on.end())
    block.used_on.push_back(last_stream);
  if (block.used_on.empty()) {
    state.free_lists[block.stream].emplace(block.size, ptr);
    return;
  }
  QuietDeviceGuard guard(device);
  PendingBlock pending{ptr, block.size, block.stream, {}};
  for (cudaStream_t user : block.used_on)
    if (cudaEvent_t event = record_on(state, user)) pending.events.push_back(event);
  state.pending.push_back(std::move(pending));
}

uint64_t begin_capture_pool(int device, cudaStream_t stream) {
  check_device(device, "begin_capture_pool");
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  ECH_CHECK(state.capturing == 0, "begin_capture_pool: cuda:", device,
            " is already capturing a graph into pool ", state.capturing);
  const uint64_t id = state.next_pool++;
  state.pools[id] = CapturePool{stream, {}, 0};
  state.capturing = id;
  return id;
}

void end_capture_pool(int device, uint64_t pool) {
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  ECH_CHECK(state.capturing == pool && pool != 0, "end_capture_pool: pool ", pool,
            " is not the one capturing on cuda:", device);
  state.capturing = 0;
}

void release_capture_pool(int device, uint64_t pool, cudaStream_t stream) noexcept {
  {
    QuietDeviceGuard guard(device);
    if (cudaStreamSynchronize(stream) != cudaSuccess) cudaGetLastError();  // the last replay
  }
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  const auto it = state.pools.find(pool);
  if (it == state.pools.end()) return;
  if (state.capturing == pool) state.capturing = 0;
  state.free_lists[kAnyStream].merge(it->second.free_blocks);
  for (auto& [ptr, block] : state.live)
    if (block.pool == pool) block.pool = 0;
  state.pools.erase(it);
}

CapturePoolStats capture_pool_stats(int device, uint64_t pool) {
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  const auto it = state.pools.find(pool);
  if (it == state.pools.end()) return {};
  return {it->second.free_blocks.size(), it->second.blocks};
}

void record_stream(int device, void* ptr, cudaStream_t stream) {
  if (!ptr) return;
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  DeviceState& state = allocator.devices[device];
  const auto it = state.live.find(ptr);
  ECH_CHECK(it != state.live.end(), "record_stream: pointer ", ptr,
            " is not the start of a live block of the caching allocator of cuda:", device);
  DeviceBlock& block = it->second;
  if (stream != block.stream &&
      std::find(block.used_on.begin(), block.used_on.end(), stream) == block.used_on.end())
    block.used_on.push_back(stream);
}

void release_stream(int device, cudaStream_t stream) noexcept {
  if (!stream) return;  // the legacy default stream is never destroyed
  {
    QuietDeviceGuard guard(device);
    // Only the owner queues work on its stream, and it is destroying it: after this, nothing that
    // the stream did can still touch memory.
    if (cudaStreamSynchronize(stream) != cudaSuccess) cudaGetLastError();
  }
  auto& allocator = device_allocator();
  std::lock_guard lock(allocator.mutex);
  const auto found = allocator.devices.find(device);
  if (found == allocator.devices.end()) return;
  DeviceState& state = found->second;
  for (auto& [ptr, block] : state.live) {
    if (block.stream == stream) block.stream = kAnyStream;
    std::erase(block.used_on, stream);
  }
  for (PendingBlock& block : state.pending)
    if (block.stream == stream) block.stream = kAnyStream;
  if (!state.free_lists.contains(stream)) return;
  auto& any_stream = state.free_lists[kAnyStream];  // may rehash: look `stream` up afterwards
  any_stream.merge(state.free_lists.at(stream));
  state.free_lists.erase(stream);
}

// ---- pinned host memory ----------------------------------------------------------------------
namespace {

struct PinnedBlock {
  size_t size;
  std::vector<cudaEvent_t> uses;  // recorded after each asynchronous copy (pinned_record_stream)
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
    PinnedBlock& block = it->second.second;
    if (!all_done(block.uses)) continue;
    for (cudaEvent_t event : block.uses) cudaEventDestroy(event);
    block.uses.clear();
    void* ptr = it->second.first;
    allocator.live[ptr] = std::move(block);
    allocator.free_blocks.erase(it);
    return ptr;
  }
  void* ptr = nullptr;
  if (cudaHostAlloc(&ptr, size, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    ECH_FAIL("pinned_malloc: cudaHostAlloc of ", nbytes, " bytes (", mib(nbytes), ") failed");
  }
  allocator.live[ptr] = PinnedBlock{size, {}};
  return ptr;
}

void pinned_free(void* ptr) {
  if (!ptr) return;
  auto& allocator = pinned_allocator_state();
  std::lock_guard lock(allocator.mutex);
  const auto it = allocator.live.find(ptr);
  ECH_CHECK(it != allocator.live.end(), "pinned_free: pointer ", ptr,
            " was not allocated by pinned_malloc");
  PinnedBlock block = std::move(it->second);
  allocator.live.erase(it);
  const size_t size = block.size;
  allocator.free_blocks.emplace(size, std::make_pair(ptr, std::move(block)));
}

void pinned_record_stream(void* ptr, cudaStream_t stream) {
  if (!ptr) return;
  auto& allocator = pinned_allocator_state();
  std::lock_guard lock(allocator.mutex);
  const auto it = allocator.live.find(ptr);
  ECH_CHECK(it != allocator.live.end(), "pinned_record_stream: pointer ", ptr,
            " is not the start of a live block of pinned_malloc");
  cudaEvent_t event = nullptr;
  ECH_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t recorded = cudaEventRecord(event, stream);
  if (recorded != cudaSuccess) {
    cudaEventDestroy(event);
    ECH_CUDA_CHECK_NAMED(recorded, "pinned_record_stream");
  }
  it->second.uses.push_back(event);
}

}  // namespace echelon::cuda
