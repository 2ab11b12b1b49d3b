// CUDA emulation: what the runtime (runtime.cpp, events.cpp), the scheduler (scheduler.cpp,
// launch.cpp) and the cuBLAS stand-in (cublas.cpp) share. Not for use outside cuda/sim.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <echelon/cuda/sim/sim.h>

// AddressSanitizer: the emulator poisons guard bytes, annotates fiber switches, and clears the
// shadow of every range it maps or unmaps itself (ASan does not: a range that was a thread's stack
// would keep its stack poison when mmap hands it out again).
#if defined(__SANITIZE_ADDRESS__)
#define ECH_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ECH_SIM_ASAN 1
#endif
#endif
#if ECH_SIM_ASAN
#include <sanitizer/asan_interface.h>
#define ECH_SIM_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define ECH_SIM_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define ECH_SIM_POISON(p, n) ((void)(p), (void)(n))
#define ECH_SIM_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace echelon::cudasim::detail {

// The emulator's environment knobs, parsed by base/env.h's readers. A bad value prints the
// reader's message and aborts: the knobs are read inside CUDA calls, which report by error code,
// never throw, and a typo must not silently emulate the default.
bool env_flag(const char* name, bool fallback);
int64_t env_integer(const char* name, int64_t fallback, int64_t low, int64_t high);
[[noreturn]] void abort_on_bad_knob(const std::string& message);

// Records `err` as the calling thread's last error (unless it is cudaSuccess/cudaErrorNotReady)
// and returns it; a sticky error, once set, is returned instead of anything else.
cudaError_t result(cudaError_t err);
// A failure that a GPU would turn into a sticky context error: prints `message` to stderr once,
// then every runtime call returns `code` (ECHELON_CUDASIM_ABORT=1: abort() here instead).
void fail(cudaError_t code, const std::string& message);
bool failed();
cudaError_t& last_error();  // the calling thread's
const char* sticky_text(
    cudaError_t err);  // the diagnosis when `err` is the sticky error, else null

// Enqueues `task` on `stream` (nullptr: the legacy default stream of the current device).
// cudaErrorInvalidResourceHandle for a stream that does not exist.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> task);

// ---- stream capture (graph.cpp); the runtime calls these before it runs or enqueues anything.
struct StreamTraits {
  int device;
  bool legacy;    // the legacy default stream
  bool blocking;  // synchronises with the legacy stream (not cudaStreamNonBlocking)
};
StreamTraits traits_of(CUstream_st* s);  // runtime.cpp
// The stream a handle names (nullptr: the current device's legacy stream), or nullptr when the
// handle is not a live stream.
CUstream_st* live_stream(cudaStream_t stream);
// Work for stream `s`: when `s` is capturing, `task` is recorded into the capture's graph and
// the call's result returned (cudaErrorStreamCaptureInvalidated once the capture has failed);
// nullopt when the work runs now. Work on the legacy stream while a blocking stream of its
// device captures fails that capture (cudaErrorStreamCaptureImplicit), as on a GPU.
std::optional<cudaError_t> capture_task(CUstream_st* s, std::function<void()>& task);
// A potentially unsafe call (cudaMalloc, cudaFree, a device/event synchronisation, a blocking
// copy) under the capture-mode rules: cudaErrorStreamCaptureUnsupported, invalidating the
// captures that forbid it, or cudaSuccess.
cudaError_t capture_unsafe_call();
// Synchronising with or querying `s`: cudaErrorStreamCaptureUnsupported (and the capture
// invalidated) while `s` captures, else capture_unsafe_call().
cudaError_t capture_stream_sync(CUstream_st* s);
// cudaEventRecord/cudaStreamWaitEvent on a capturing stream, or naming an event recorded in a
// capture, become dependencies inside the graph (a wait can make `s` join the capture): the
// result then, nullopt when the call runs as usual.
std::optional<cudaError_t> capture_event_record(const void* event, CUstream_st* s);
std::optional<cudaError_t> capture_event_wait(const void* event, CUstream_st* s);
// True when `event` was last recorded in a capture still under way (it cannot be queried).
bool capture_event_pending(const void* event);

// Where a pointer lives. Device and pinned memory are the emulator's own allocations.
enum class Where : uint8_t { Host, Device, Pinned };
Where where(const void* ptr, size_t bytes = 0);  // Host also when [ptr, ptr+bytes) overruns
int device_of(const void* ptr);                  // -1 unless device memory
// Checks every live device allocation's guard bytes, and whether an access reached a guard
// region (guard_pages.cpp); either fails the context, naming `after` (the kernel or copy that ran
// last) or the kernel, block and thread that touched the guard page.
void check_guards(const std::string& after);

// ---- device memory (guard_pages.cpp) -----------------------------------------------------------
// kGuardBytes guard bytes (0xA5) on each side of an allocation, checked after every kernel and
// copy; kGuardBytes is also cudaMalloc's alignment.
constexpr size_t kGuardBytes = 256;
// One allocation's mapping: PROT_NONE guard region | front guard bytes | the allocation | back
// guard bytes (ending at a page end) | PROT_NONE guard region.
struct DeviceMapping {
  unsigned char* start = nullptr;  // the whole mapping
  size_t length = 0;
  unsigned char* front = nullptr;  // the first read-write byte (front guard bytes up to `user`)
  unsigned char* user = nullptr;   // what cudaMalloc returns
  size_t slot = 0;                 // in the fault handler's registry
};
// Maps `size` bytes (their contents undefined); false when the address space is exhausted.
bool map_device_memory(size_t size, DeviceMapping& out);
void unmap_device_memory(const DeviceMapping& mapping);
// The first access into a guard region since the last call, described (the kernel, block, thread,
// read or write, and how far outside which allocation), or empty; the touched pages are closed.
std::string take_guard_fault();
// Installs the guard-page fault handler unless it is the current one (before every kernel: a
// test framework may have taken SIGSEGV since); the replaced handler gets the other faults.
void ensure_fault_handler();
// Gives the calling thread an alternate signal stack (a stream's worker, before its first task):
// a CUDA thread's stack overflow is then reported instead of killing the process silently.
void prepare_fault_stack();

// What the calling OS thread runs, for the fault handler: read without allocating or locking.
struct FaultSite {
  const char* kernel = nullptr;
  const char* file = nullptr;
  int line = 0;
  uint3 block{}, thread{};
  const void* stack_bottom = nullptr;  // the running CUDA thread's stack; a guard page below it
  size_t stack_size = 0;
};
bool running_kernel(FaultSite& site);  // false outside a kernel (scheduler.cpp)

int current_device();
int device_count();
void count_host_synchronization();  // cudasim::host_synchronizations() counts one more
Order launch_order();               // the order for a launch enqueued now
uint64_t next_launch_id();
void count_launch(uint64_t blocks, uint64_t threads);

// "file.cpp:line" (the file's last path component), as the emulator's messages name a site.
std::string site(const char* file, int line);

// Runs one launch; called on the stream's worker thread.
struct Grid {
  const char* kernel;
  const char* file;
  int line;
  dim3 grid, block;
  size_t dynamic_smem;
  Order order;
  uint64_t launch_id;
  std::function<void()> body;
};
void run_grid(const Grid& grid);

}  // namespace echelon::cudasim::detail
