// CUDA emulation: the runtime. Why it is built this way:
// - device memory is host memory, NaN-filled (0xFF bytes) on allocation so that a kernel reading
//   what nobody wrote produces NaN, with guard bytes on both sides, checked after every kernel and
//   copy (and poisoned for AddressSanitizer, which then reports the faulting access itself), each
//   allocation its own mapping between PROT_NONE guard regions (guard_pages.cpp), so that an
//   access further out faults at once instead of landing in the host heap;
// - a stream is a worker thread with a queue, an event a (recorded, completed) generation pair,
//   so cross-stream code really runs concurrently and a missing wait shows up as a wrong value
//   or a TSan/ASan report instead of passing because everything ran in order;
// - errors follow the real runtime: usage errors go to the thread's last error, kernel faults
//   are sticky and returned by every later call.
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <echelon/cuda/sim/internal.h>

using echelon::cudasim::detail::result;

// ---- streams (events: events.cpp) --------------------------------------------------------------

struct CUstream_st {
  int device = 0;
  unsigned flags = 0;
  bool legacy = false;
  std::mutex mutex;
  std::condition_variable cv;
  struct Task {
    std::function<void()> fn;
    std::vector<std::pair<CUstream_st*, uint64_t>> after;  // (stream, its task count) to wait for
  };
  std::deque<Task> queue;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false;
  std::thread worker;

  void wait_for(uint64_t count) {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return completed >= count; });
  }
  void run() {
    echelon::cudasim::detail::prepare_fault_stack();
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      for (auto& [other, count] : task.after) other->wait_for(count);
      if (task.fn) task.fn();
      std::lock_guard lock(mutex);
      ++completed;
      cv.notify_all();
    }
  }
};

namespace echelon::cudasim::detail {
namespace {

constexpr unsigned char kGuardByte = 0xA5;
constexpr int64_t kMostDevices = 64, kMostMemoryMiB = int64_t{1} << 20;  // sanity bounds

struct Allocation {
  size_t size;
  int device;             // -1: pinned host memory
  DeviceMapping mapping;  // device memory only
};

struct State {
  std::mutex mutex;
  int devices = static_cast<int>(env_integer("ECHELON_CUDASIM_DEVICES", 1, 0, kMostDevices));
  bool peer_capable = env_flag("ECHELON_CUDASIM_PEER", true);
  std::set<std::pair<int, int>> peer_enabled;  // (device, peer): device may access peer's memory
  size_t memory_limit =
      static_cast<size_t>(env_integer("ECHELON_CUDASIM_MEMORY_MB", 8192, 1, kMostMemoryMiB)) << 20;
  bool abort_on_fault = env_flag("ECHELON_CUDASIM_ABORT", false);
  std::map<uintptr_t, Allocation> allocations;  // by user pointer
  std::vector<size_t> used;                     // bytes per device
  std::set<CUstream_st*> streams;
  std::vector<CUstream_st*> legacy;  // per device, created on first use
  std::mutex sticky_mutex;
  cudaError_t sticky = cudaSuccess;
  std::deque<std::string> messages;  // never shrinks: cudaGetErrorString returns c_str()s
  std::atomic<uint64_t> launch_ids{0}, kernels{0}, blocks{0}, threads{0};
  State() : used(static_cast<size_t>(std::max(devices, 0)), 0), legacy(used.size(), nullptr) {}
};

// Never destroyed: worker threads may still wait on it while the process exits.
State& state() {
  static State* s = new State;
  return *s;
}

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;

CUstream_st* start_stream(int device, unsigned flags, bool legacy) {
  auto* s = new CUstream_st;
  s->device = device;
  s->flags = flags;
  s->legacy = legacy;
  s->worker = std::thread([s] { s->run(); });
  return s;
}

// The stream a handle names, or nullptr when the handle is not a live stream.
CUstream_st* resolve(cudaStream_t stream) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  if (stream == nullptr) {
    if (t_device < 0 || t_device >= st.devices) return nullptr;
    CUstream_st*& legacy = st.legacy[static_cast<size_t>(t_device)];
    if (!legacy) legacy = start_stream(t_device, cudaStreamDefault, true);
    return legacy;
  }
  return st.streams.count(stream) ? stream : nullptr;
}

// Legacy default stream semantics: it waits for all blocking streams of its device, and they
// wait for it. Our own streams are all non-blocking, but cudaStreamCreate's are not.
std::vector<std::pair<CUstream_st*, uint64_t>> implicit_waits(CUstream_st* s) {
  std::vector<std::pair<CUstream_st*, uint64_t>> after;
  State& st = state();
  std::lock_guard lock(st.mutex);
  auto tail = [](CUstream_st* other) {
    std::lock_guard l(other->mutex);
    return other->enqueued;
  };
  if (s->legacy) {
    for (CUstream_st* other : st.streams)
      if (other->device == s->device && !(other->flags & cudaStreamNonBlocking))
        after.emplace_back(other, tail(other));
  } else if (!(s->flags & cudaStreamNonBlocking)) {
    if (CUstream_st* legacy = st.legacy[static_cast<size_t>(s->device)])
      after.emplace_back(legacy, tail(legacy));
  }
  return after;
}

uint64_t push(CUstream_st* s, std::function<void()> fn) {
  auto after = implicit_waits(s);
  std::lock_guard lock(s->mutex);
  s->queue.push_back({std::move(fn), std::move(after)});
  s->cv.notify_all();
  return ++s->enqueued;
}

uint64_t tail_of(CUstream_st* s) {
  std::lock_guard lock(s->mutex);
  return s->enqueued;
}

void synchronize_device(int device) {
  std::vector<CUstream_st*> all;
  {
    State& st = state();
    std::lock_guard lock(st.mutex);
    for (CUstream_st* s : st.streams)
      if (s->device == device) all.push_back(s);
    if (device >= 0 && device < st.devices && st.legacy[static_cast<size_t>(device)])
      all.push_back(st.legacy[static_cast<size_t>(device)]);
  }
  for (CUstream_st* s : all) s->wait_for(tail_of(s));
}

// Usage errors carry an explanation on stderr: the error code alone rarely says which pointer.
cudaError_t usage(cudaError_t err, const std::string& why) {
  std::fprintf(stderr, "cudasim: %s\n", why.c_str());
  return result(err);
}

const char* kind_name(cudaMemcpyKind kind) {
  static const char* names[] = {"HostToHost", "HostToDevice", "DeviceToHost", "DeviceToDevice",
                                "Default"};
  return kind >= 0 && kind <= 4 ? names[kind] : "?";
}

cudaError_t check_copy(const char* call, void* dst, const void* src, size_t count,
                       cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return usage(cudaErrorInvalidMemcpyDirection, std::string(call) + ": invalid kind");
  const bool dst_device = where(dst) == Where::Device, src_device = where(src) == Where::Device;
  if (dst_device && where(dst, count) != Where::Device)
    return usage(cudaErrorInvalidValue,
                 std::string(call) + ": destination overruns its allocation");
  if (src_device && where(src, count) != Where::Device)
    return usage(cudaErrorInvalidValue, std::string(call) + ": source overruns its allocation");
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind != cudaMemcpyDefault && (dst_device != want_dst || src_device != want_src))
    return usage(cudaErrorInvalidValue,
                 std::string(call) + ": kind cudaMemcpy" + kind_name(kind) +
                     " but the destination is " + (dst_device ? "device" : "host") +
                     " memory and the source " + (src_device ? "device" : "host") + " memory");
  return cudaSuccess;
}

cudaError_t copy_async(const char* call, void* dst, const void* src, size_t count,
                       cudaStream_t stream) {
  if (count == 0) return result(cudaSuccess);
  return result(enqueue(stream, [dst, src, count, call] {
    if (failed()) return;
    std::memmove(dst, src, count);
    check_guards(call);
  }));
}

}  // namespace

// ---- shared with the scheduler -----------------------------------------------------------------

cudaError_t result(cudaError_t err) {
  State& st = state();
  {
    std::lock_guard lock(st.sticky_mutex);
    if (st.sticky != cudaSuccess) return st.sticky;
  }
  if (err != cudaSuccess && err != cudaErrorNotReady) t_last_error = err;
  return err;
}

void fail(cudaError_t code, const std::string& message) {
  State& st = state();
  {
    std::lock_guard lock(st.sticky_mutex);
    if (st.sticky != cudaSuccess) return;  // the first fault is the one worth reading
    st.sticky = code;
    st.messages.push_back(message);
  }
  std::fprintf(stderr, "cudasim: %s\n", message.c_str());
  if (st.abort_on_fault) std::abort();
}

bool failed() {
  State& st = state();
  std::lock_guard lock(st.sticky_mutex);
  return st.sticky != cudaSuccess;
}

cudaError_t enqueue(cudaStream_t stream, std::function<void()> task) {
  CUstream_st* s = resolve(stream);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (const auto captured = capture_task(s, task)) return *captured;
  push(s, std::move(task));
  return cudaSuccess;
}

StreamTraits traits_of(CUstream_st* s) {
  return {s->device, s->legacy, s->legacy || !(s->flags & cudaStreamNonBlocking)};
}

CUstream_st* live_stream(cudaStream_t stream) {
  return resolve(stream);
}

Where where(const void* ptr, size_t bytes) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return Where::Host;
  --it;
  if (p + bytes > it->first + it->second.size || (bytes == 0 && p > it->first + it->second.size))
    return Where::Host;
  return it->second.device >= 0 ? Where::Device : Where::Pinned;
}

int device_of(const void* ptr) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = st.allocations.upper_bound(p);
  if (it == st.allocations.begin()) return -1;
  --it;
  return p <= it->first + it->second.size ? it->second.device : -1;
}

// How far from the allocation the damage to `guard` (`bytes` of guard bytes just before or just
// after it) reaches; 0 when intact. memcmp first: this runs after every kernel.
size_t damage(const unsigned char* guard, size_t bytes, bool before_allocation) {
  // Constant-initialised, never destroyed: a worker may still check while the process exits.
  static constexpr std::array<unsigned char, 4096> intact = [] {
    std::array<unsigned char, 4096> bytes{};
    bytes.fill(kGuardByte);
    return bytes;
  }();
  bool changed = false;
  for (size_t at = 0; at < bytes && !changed; at += intact.size())
    changed = std::memcmp(guard + at, intact.data(), std::min(intact.size(), bytes - at)) != 0;
  if (!changed) return 0;
  size_t reach = 0;
  for (size_t i = 0; i < bytes; ++i)
    if (guard[i] != kGuardByte) reach = std::max(reach, before_allocation ? bytes - i : i + 1);
  return reach;
}

void check_guards(const std::string& after) {
  if (std::string fault = take_guard_fault(); !fault.empty())
    return fail(cudaErrorIllegalAddress, fault);
  State& st = state();
  std::string problem;
  {
    std::lock_guard lock(st.mutex);
    for (const auto& [user, a] : st.allocations) {
      if (a.device < 0) continue;
      unsigned char* front = a.mapping.front;
      unsigned char* back = a.mapping.user + a.size;
      const size_t front_bytes = static_cast<size_t>(a.mapping.user - front);
      const size_t back_bytes = kGuardBytes + (kGuardBytes - a.size % kGuardBytes) % kGuardBytes;
      ECH_SIM_UNPOISON(front, front_bytes);
      ECH_SIM_UNPOISON(back, back_bytes);
      const size_t before = damage(front, front_bytes, true),
                   past = damage(back, back_bytes, false);
      if (before) problem = "wrote up to " + std::to_string(before) + " bytes before";
      if (past) problem = "wrote up to " + std::to_string(past) + " bytes past the end of";
      // Repaired, so that one overrun is reported once, not again by every later check.
      std::memset(front, kGuardByte, front_bytes);
      std::memset(back, kGuardByte, back_bytes);
      ECH_SIM_POISON(front, front_bytes);
      ECH_SIM_POISON(back, back_bytes);
      if (!problem.empty()) {
        problem += " a device allocation of " + std::to_string(a.size) + " bytes";
        break;
      }
    }
  }
  if (!problem.empty()) fail(cudaErrorIllegalAddress, after + ": out-of-bounds write: " + problem);
}

int current_device() {
  return t_device;
}
int device_count() {
  return std::max(state().devices, 0);
}
uint64_t next_launch_id() {
  return state().launch_ids++;
}
void count_launch(uint64_t blocks, uint64_t threads) {
  State& st = state();
  ++st.kernels;
  st.blocks += blocks;
  st.threads += threads;
}

cudaError_t& last_error() {
  return t_last_error;
}

const char* sticky_text(cudaError_t err) {
  State& st = state();
  std::lock_guard lock(st.sticky_mutex);
  return err != cudaSuccess && err == st.sticky ? st.messages.back().c_str() : nullptr;
}

}  // namespace echelon::cudasim::detail

namespace echelon::cudasim {

std::string sticky_message() {
  auto& st = detail::state();
  std::lock_guard lock(st.sticky_mutex);
  return st.sticky == cudaSuccess ? std::string() : st.messages.back();
}

void clear_sticky_error() {
  for (int d = 0; d < detail::device_count(); ++d) detail::synchronize_device(d);
  auto& st = detail::state();
  std::lock_guard lock(st.sticky_mutex);
  st.sticky = cudaSuccess;
  detail::t_last_error = cudaSuccess;
}

Stats stats() {
  auto& st = detail::state();
  return {st.kernels.load(), st.blocks.load(), st.threads.load()};
}

namespace {
std::atomic<uint64_t> g_host_synchronizations{0};
}  // namespace

uint64_t host_synchronizations() {
  return g_host_synchronizations.load();
}

void detail::count_host_synchronization() {
  ++g_host_synchronizations;
}

}  // namespace echelon::cudasim

// ---- the runtime API ---------------------------------------------------------------------------

using namespace echelon::cudasim::detail;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return result(*count == 0 ? cudaErrorNoDevice : cudaSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return result(cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return result(cudaErrorInvalidDevice);
  t_device = device;
  return result(cudaSuccess);
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  const int count = device_count();
  if (device < 0 || device >= count || peer_device < 0 || peer_device >= count)
    return result(cudaErrorInvalidDevice);
  *can_access = state().peer_capable && device != peer_device ? 1 : 0;
  return result(cudaSuccess);
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  if (flags != 0)
    return usage(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags must be 0");
  if (peer_device < 0 || peer_device >= device_count() || peer_device == t_device)
    return result(cudaErrorInvalidDevice);
  State& st = state();
  if (!st.peer_capable) return result(cudaErrorPeerAccessUnsupported);
  std::lock_guard<std::mutex> lock(st.mutex);
  if (!st.peer_enabled.emplace(t_device, peer_device).second)
    return result(cudaErrorPeerAccessAlreadyEnabled);
  return result(cudaSuccess);
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  echelon::cudasim::detail::count_host_synchronization();
  synchronize_device(t_device);
  return result(cudaSuccess);
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  *ptr = nullptr;
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  if (size == 0) return result(cudaSuccess);
  State& st = state();
  const size_t padded = (size + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  {
    std::lock_guard lock(st.mutex);
    if (t_device < 0 || t_device >= st.devices) return result(cudaErrorInvalidDevice);
    size_t& used = st.used[static_cast<size_t>(t_device)];
    if (size > st.memory_limit || used + padded > st.memory_limit)
      return result(cudaErrorMemoryAllocation);
    used += padded;
  }
  DeviceMapping mapping;
  if (!map_device_memory(size, mapping)) {
    std::lock_guard lock(st.mutex);
    st.used[static_cast<size_t>(t_device)] -= padded;
    return result(cudaErrorMemoryAllocation);
  }
  unsigned char* guard_end = mapping.user + padded + kGuardBytes;
  std::memset(mapping.front, kGuardByte, static_cast<size_t>(mapping.user - mapping.front));
  std::memset(mapping.user, 0xFF, size);  // float NaN, int -1: "nobody wrote this"
  std::memset(mapping.user + size, kGuardByte,
              static_cast<size_t>(guard_end - mapping.user) - size);
  ECH_SIM_POISON(mapping.front, static_cast<size_t>(mapping.user - mapping.front));
  ECH_SIM_POISON(mapping.user + size, static_cast<size_t>(guard_end - mapping.user) - size);
  *ptr = mapping.user;
  std::lock_guard lock(st.mutex);
  st.allocations[reinterpret_cast<uintptr_t>(*ptr)] = {size, t_device, mapping};
  return result(cudaSuccess);
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return result(cudaSuccess);
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  State& st = state();
  Allocation a{};
  {
    std::lock_guard lock(st.mutex);
    auto it = st.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == st.allocations.end() || it->second.device < 0)
      return usage(cudaErrorInvalidValue, "cudaFree: not a pointer returned by cudaMalloc");
    a = it->second;
  }
  synchronize_device(a.device);  // as the real cudaFree does
  check_guards("cudaFree");
  std::lock_guard lock(st.mutex);
  st.allocations.erase(reinterpret_cast<uintptr_t>(ptr));
  const size_t padded = (a.size + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  st.used[static_cast<size_t>(a.device)] -= padded;
  ECH_SIM_UNPOISON(a.mapping.front,
                   static_cast<size_t>(a.mapping.user + padded + kGuardBytes - a.mapping.front));
  unmap_device_memory(a.mapping);
  return result(cudaSuccess);
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned) {
  const size_t padded = (std::max<size_t>(size, 1) + kGuardBytes - 1) / kGuardBytes * kGuardBytes;
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(kGuardBytes, padded));
  if (!base) return result(cudaErrorMemoryAllocation);
  std::memset(base, 0xFF, padded);
  *ptr = base;
  State& st = state();
  std::lock_guard lock(st.mutex);
  st.allocations[reinterpret_cast<uintptr_t>(base)] = {size, -1, {}};
  return result(cudaSuccess);
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, 0);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return result(cudaSuccess);
  State& st = state();
  {
    std::lock_guard lock(st.mutex);
    auto it = st.allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == st.allocations.end() || it->second.device >= 0)
      return usage(cudaErrorInvalidValue, "cudaFreeHost: not a pointer returned by cudaHostAlloc");
    st.allocations.erase(it);
  }
  std::free(ptr);
  return result(cudaSuccess);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& st = state();
  std::lock_guard lock(st.mutex);
  if (t_device < 0 || t_device >= st.devices) return result(cudaErrorInvalidDevice);
  *total_bytes = st.memory_limit;
  *free_bytes = st.memory_limit - st.used[static_cast<size_t>(t_device)];
  return result(cudaSuccess);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (const cudaError_t err = check_copy("cudaMemcpyAsync", dst, src, count, kind)) return err;
  return copy_async("cudaMemcpyAsync", dst, src, count, stream);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  if (const cudaError_t err = check_copy("cudaMemcpy", dst, src, count, kind)) return err;
  if (const cudaError_t err = copy_async("cudaMemcpy", dst, src, count, nullptr)) return err;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t count, cudaStream_t stream) {
  if (device_of(dst) != dst_device || where(dst, count) != Where::Device ||
      device_of(src) != src_device || where(src, count) != Where::Device)
    return usage(cudaErrorInvalidValue,
                 "cudaMemcpyPeerAsync: a pointer is not device memory of the device named, or "
                 "the range overruns its allocation");
  return copy_async("cudaMemcpyPeerAsync", dst, src, count, stream);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return result(cudaSuccess);
  if (where(ptr, count) != Where::Device)
    return usage(cudaErrorInvalidValue, "cudaMemsetAsync: the range is not device memory");
  return result(enqueue(stream, [ptr, value, count] {
    if (!failed()) std::memset(ptr, value, count);
  }));
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  if (const cudaError_t err = cudaMemsetAsync(ptr, value, count, nullptr)) return err;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (t_device < 0 || t_device >= device_count()) return result(cudaErrorInvalidDevice);
  CUstream_st* s = start_stream(t_device, flags, false);
  State& st = state();
  std::lock_guard lock(st.mutex);
  st.streams.insert(s);
  *stream = s;
  return result(cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& st = state();
  {
    std::lock_guard lock(st.mutex);
    if (!stream || !st.streams.erase(stream)) return result(cudaErrorInvalidResourceHandle);
  }
  {
    // Queued work still completes (as on a GPU); the worker exits once the queue is empty.
    std::lock_guard lock(stream->mutex);
    stream->stop = true;
    stream->cv.notify_all();
  }
  stream->worker.join();
  delete stream;
  return result(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return result(cudaErrorInvalidResourceHandle);
  if (const cudaError_t err = capture_stream_sync(s)) return result(err);
  echelon::cudasim::detail::count_host_synchronization();
  s->wait_for(tail_of(s));
  return result(cudaSuccess);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = resolve(stream);
  if (!s) return result(cudaErrorInvalidResourceHandle);
  if (const cudaError_t err = capture_stream_sync(s)) return result(err);
  std::lock_guard lock(s->mutex);
  return result(s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  return result(enqueue(stream, [fn, user_data] { fn(user_data); }));
}
