// Kernels on the trace's timeline. On a CUDA device every traced operation (a partition's
// forward "F 12", each layer inside it, backward "B 12", the optimizer "step") gets a pair of
// CUDA events recorded on the stream it runs on; finished pairs are turned into trace events on
// a "cuda:N" track per partition later, without blocking (resolve), so tracing adds no
// synchronisation per op. One event recorded at the start and waited for once ties the device
// clock to the host clock of TraceRecorder. In the CUDA build each span is also an NVTX range of
// the same name, so Nsight Systems shows the names of the trace.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/parallel/trace.h>
#include <echelon/tensor/device.h>

namespace echelon::cuda {
class Event;
}

namespace echelon::parallel {

class DeviceTrace {
 public:
  // Inactive (every call a no-op) without a recorder or off CUDA.
  DeviceTrace(TraceRecorder* recorder, Device device, int partition);
  ~DeviceTrace();
  DeviceTrace(const DeviceTrace&) = delete;
  DeviceTrace& operator=(const DeviceTrace&) = delete;

  bool active() const { return active_; }
  // Opens a span on the calling thread's current stream of the device; spans nest.
  void begin(std::string name, int64_t id = -1);
  void end();  // closes the innermost open span
  // Records every closed span whose end event has completed. wait: synchronise on the last
  // recorded event first (at a flush, when the partition is idle anyway).
  void resolve(bool wait);

 private:
  struct Span {
    std::string name;
    int64_t id = -1;
    std::shared_ptr<cuda::Event> start, end;  // shared: the type is incomplete without CUDA
  };
  [[maybe_unused]] TraceRecorder* recorder_;  // both read only by the CUDA build
  Device device_;
  bool active_ = false;
  [[maybe_unused]] int track_ = -1;
  std::shared_ptr<cuda::Event> anchor_;  // device time 0 of the mapping
  TraceRecorder::Clock::time_point anchor_host_;
  std::vector<Span> spans_;   // in order of begin
  std::vector<size_t> open_;  // indices into spans_ of the open spans, innermost last
};

// begin() now, end() at scope exit.
class DeviceSpan {
 public:
  DeviceSpan(DeviceTrace& trace, std::string name, int64_t id = -1) : trace_(trace) {
    if (trace_.active()) trace_.begin(std::move(name), id);
  }
  ~DeviceSpan() {
    if (trace_.active()) trace_.end();
  }
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;

 private:
  DeviceTrace& trace_;
};

}  // namespace echelon::parallel
