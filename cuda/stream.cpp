// Device selection, owning stream/event wrappers, and the per-thread current stream. The current
// stream is thread-local and per device so that a pipeline stage thread can route every op it
// launches to its own stream without passing streams through the op interface.
#include <echelon/cuda/stream.h>

#include <algorithm>
#include <limits>
#include <unordered_map>
#include <utility>

#include <echelon/cuda/allocator.h>

namespace echelon::cuda {

int device_count() {
  // Must never throw: CPU-only machines and test binaries call it to decide whether to skip.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the error so later checks do not report it
    return 0;
  }
  return count;
}

bool enable_peer_access(int device, int peer) {
  if (device == peer) return false;
  int can_access = 0;
  ECH_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device, peer));
  if (!can_access) return false;
  DeviceGuard guard(device);
  const cudaError_t err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();  // an earlier pipeline in this process enabled it: not an error
    return true;
  }
  ECH_CUDA_CHECK(err);
  return true;
}

int current_device() {
  int device = 0;
  ECH_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

void set_device(int index) {
  const int count = device_count();
  ECH_CHECK(index >= 0 && index < count, "set_device: CUDA device ", index,
            " does not exist (this machine has ", count, ")");
  ECH_CUDA_CHECK(cudaSetDevice(index));
}

void create_context(int index) {
  set_device(index);
  ECH_CUDA_CHECK(cudaFree(nullptr));  // the documented way to force the context into existence
}

DeviceGuard::DeviceGuard(int index) : previous_(current_device()) {
  if (index != previous_) set_device(index);
}

DeviceGuard::~DeviceGuard() {
  // Destructors must not throw; restoring a device that was valid a moment ago cannot fail
  // unless the context is already broken, and then there is nothing better to do.
  cudaSetDevice(previous_);
}

Stream::Stream(int device) : device_(device < 0 ? current_device() : device) {
  DeviceGuard guard(device_);
  ECH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

// The allocator forgets the stream first (synchronizing it): its handle may be recycled for the
// next stream created, which must not inherit blocks this stream's queued work still touches.
Stream::~Stream() {
  if (stream_) {
    release_stream(device_, stream_);
    cudaStreamDestroy(stream_);
  }
}

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_) {
      release_stream(device_, stream_);
      cudaStreamDestroy(stream_);
    }
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

void Stream::synchronize() const {
  ECH_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Event::Event(bool timing) {
  ECH_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::record(cudaStream_t stream) {
  ECH_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::wait(cudaStream_t stream) const {
  ECH_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void Event::synchronize() const {
  ECH_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  ECH_CUDA_CHECK_NAMED(status, "Event::query");
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0.0f;
  ECH_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

bool stream_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

double fastest_run_ms(cudaStream_t stream, int runs, double give_up_ms,
                      const std::function<void()>& run) {
  Event start(/*timing=*/true), stop(/*timing=*/true);
  run();
  double fastest = std::numeric_limits<double>::infinity();
  for (int i = 0; i < runs; ++i) {
    start.record(stream);
    run();
    stop.record(stream);
    stop.synchronize();
    fastest = std::min(fastest, static_cast<double>(start.elapsed_ms(stop)));
    if (fastest > give_up_ms) break;
  }
  return fastest;
}

namespace {
// Absent entry = the legacy default stream (nullptr).
std::unordered_map<int, cudaStream_t>& thread_streams() {
  thread_local std::unordered_map<int, cudaStream_t> streams;
  return streams;
}
}  // namespace

cudaStream_t current_stream(int device) {
  if (device < 0) device = current_device();
  const auto& streams = thread_streams();
  const auto it = streams.find(device);
  return it == streams.end() ? nullptr : it->second;
}

void set_current_stream(cudaStream_t stream, int device) {
  if (device < 0) device = current_device();
  thread_streams()[device] = stream;
}

StreamGuard::StreamGuard(cudaStream_t stream, int device)
    : device_guard_(device), device_(device), previous_(current_stream(device)) {
  set_current_stream(stream, device_);
}

StreamGuard::~StreamGuard() {
  thread_streams()[device_] = previous_;
}

}  // namespace echelon::cuda
