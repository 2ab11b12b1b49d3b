#include <echelon/parallel/device_trace.h>

#include <chrono>

#include <echelon/base/error.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#endif
// NVTX v3 is header-only (no library to link); the emulation build has no toolkit headers.
#if ECHELON_WITH_CUDA && !ECHELON_CUDA_SIM
#include <nvtx3/nvToolsExt.h>
#define ECHELON_NVTX 1
#endif

namespace echelon::parallel {

DeviceTrace::DeviceTrace(TraceRecorder* recorder, Device device, int partition)
    : recorder_(recorder), device_(device) {
#if ECHELON_WITH_CUDA
  active_ = recorder_ != nullptr && device_.is_cuda();
  if (active_) {
    track_ = recorder_->add_track(
        device_.to_string(), "partition " + std::to_string(partition) + " stream (events per op)");
  }
#else
  (void)partition;
#endif
}

DeviceTrace::~DeviceTrace() = default;

#if ECHELON_WITH_CUDA

void DeviceTrace::begin(std::string name, int64_t id) {
  if (!active_) return;
  const cudaStream_t stream = cuda::current_stream(device_.index);
  if (!anchor_) {
    // The one synchronisation: afterwards a device time is anchor_host_ + elapsed(anchor_, t).
    anchor_ = std::make_shared<cuda::Event>(true);
    anchor_->record(stream);
    anchor_->synchronize();
    anchor_host_ = TraceRecorder::Clock::now();
  }
#ifdef ECHELON_NVTX
  nvtxRangePushA((id >= 0 ? name + " " + std::to_string(id) : name).c_str());
#endif
  Span span;
  span.name = std::move(name);
  span.id = id;
  span.start = std::make_shared<cuda::Event>(true);
  span.start->record(stream);
  open_.push_back(spans_.size());
  spans_.push_back(std::move(span));
}

void DeviceTrace::end() {
  if (!active_) return;
  ECH_CHECK(!open_.empty(), "DeviceTrace::end without a matching begin");
  Span& span = spans_[open_.back()];
  open_.pop_back();
  span.end = std::make_shared<cuda::Event>(true);
  span.end->record(cuda::current_stream(device_.index));
#ifdef ECHELON_NVTX
  nvtxRangePop();
#endif
}

void DeviceTrace::resolve(bool wait) {
  if (!active_ || spans_.empty()) return;
  if (wait) ECH_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(device_.index)));
  const auto host_time = [&](const cuda::Event& event) {
    const double ms = static_cast<double>(anchor_->elapsed_ms(event));
    return anchor_host_ + std::chrono::duration_cast<TraceRecorder::Clock::duration>(
                              std::chrono::duration<double, std::milli>(ms));
  };
  std::vector<Span> pending;
  for (Span& span : spans_) {
    if (!span.end || !span.end->query()) {
      pending.push_back(std::move(span));
      continue;
    }
    const std::string label = span.id >= 0 ? span.name + " " + std::to_string(span.id) : span.name;
    recorder_->record_on(track_, label, host_time(*span.start), host_time(*span.end), span.id);
  }
  // Open spans keep their place: renumber them in the kept list.
  open_.clear();
  for (size_t i = 0; i < pending.size(); ++i)
    if (!pending[i].end) open_.push_back(i);
  spans_ = std::move(pending);
}

#else  // a CPU-only build has no device to time

// NOLINTNEXTLINE(performance-unnecessary-value-param): by value for the CUDA build, which moves it
void DeviceTrace::begin(std::string, int64_t) {}
void DeviceTrace::end() {}
void DeviceTrace::resolve(bool) {}

#endif

}  // namespace echelon::parallel
