// Streams and events. Each thread has a current stream per device (default: the legacy default
// stream 0); StreamGuard swaps it for a scope. Device kernels launched by ops go to the current
// stream of the tensor's device.
#pragma once

#include <cuda_runtime.h>

#include <functional>

#include <echelon/cuda/check.h>

namespace echelon::cuda {

int device_count();  // 0 when the driver or GPU is missing (never throws)
// Lets `device` read and write `peer`'s memory directly (NVLink / PCIe peer-to-peer) when the pair
// allows it; returns whether it does. Without it, peer copies still work, staged by the driver.
bool enable_peer_access(int device, int peer);
int current_device();
void set_device(int index);
// Creates device `index`'s primary context now, on the calling thread (whose current device it
// becomes): the first CUDA call that needs a context would otherwise pay for it.
void create_context(int index);

// Makes `index` current for a scope and restores the previous device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// Owning stream (non-blocking w.r.t. the legacy default stream). The destructor waits for the
// stream's queued work (the caching allocator must forget it before its handle is recycled).
class Stream {
 public:
  explicit Stream(int device = -1);  // -1: current device
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void wait(cudaStream_t stream) const;  // stream waits for this event (no host block)
  void synchronize() const;              // host waits
  bool query() const;                    // true when complete
  float elapsed_ms(const Event& end) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Whether work queued on `stream` is being captured into a CUDA graph (then nothing may time or
// synchronise it); a query the runtime refuses (the legacy stream beside a capture) counts as
// capturing.
bool stream_capturing(cudaStream_t stream);

// How the autotuners time a candidate (conv_tune.cu, cudnn/conv.cpp): one warm-up run of `run` on
// `stream`, then up to `runs` runs timed by CUDA events (the host waits for each), stopping early
// once the fastest so far is above `give_up_ms`. Returns the fastest timed run, in ms. Never during
// capture (stream_capturing).
double fastest_run_ms(cudaStream_t stream, int runs, double give_up_ms,
                      const std::function<void()>& run);

// The calling thread's current stream on `device` (-1: current device).
cudaStream_t current_stream(int device = -1);
void set_current_stream(cudaStream_t stream, int device = -1);

// Sets the calling thread's current stream (and device) for a scope.
class StreamGuard {
 public:
  StreamGuard(cudaStream_t stream, int device);
  explicit StreamGuard(const Stream& stream) : StreamGuard(stream.get(), stream.device()) {}
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  DeviceGuard device_guard_;
  int device_;
  cudaStream_t previous_;
};

}  // namespace echelon::cuda
