// CUDA emulation: events. An event is a (recorded, completed) pair of generations: a record bumps
// `recorded` now and enqueues the bump of `completed` (with the time) on the stream, so a query,
// a synchronisation or a stream's wait compares the two, as a GPU's event semantics require (the
// most recent record at the time of the call counts). Inside a stream capture, records and waits
// become graph dependencies (graph.cpp).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include <echelon/cuda/sim/internal.h>

struct CUevent_st {
  unsigned flags = 0;
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;  // generations: record() bumps `recorded`
  std::chrono::steady_clock::time_point when;
};

namespace echelon::cudasim::detail {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<CUevent_st*, std::shared_ptr<CUevent_st>> events;  // queued records hold a share
};

// Never destroyed: stream workers may still complete a record while the process exits.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

std::shared_ptr<CUevent_st> find_event(cudaEvent_t event) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.events.find(event);
  return it == r.events.end() ? nullptr : it->second;
}
bool valid_event(cudaEvent_t event) {
  return find_event(event) != nullptr;
}

}  // namespace
}  // namespace echelon::cudasim::detail

using namespace echelon::cudasim::detail;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  auto e = std::make_shared<CUevent_st>();
  e->flags = flags;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.events[e.get()] = e;
  *event = e.get();
  return result(cudaSuccess);
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  // A record still queued keeps its share of the event (the real runtime defers the release too).
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return result(r.events.erase(event) ? cudaSuccess : cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t stream) {
  const std::shared_ptr<CUevent_st> event = find_event(handle);
  if (!event) return result(cudaErrorInvalidResourceHandle);
  CUstream_st* s = live_stream(stream);
  if (!s) return result(cudaErrorInvalidResourceHandle);
  if (const auto captured = capture_event_record(handle, s)) return result(*captured);
  uint64_t generation = 0;
  {
    std::lock_guard lock(event->mutex);
    generation = ++event->recorded;
  }
  const cudaError_t err = enqueue(stream, [event, generation] {
    std::lock_guard lock(event->mutex);
    event->completed = std::max(event->completed, generation);
    event->when = std::chrono::steady_clock::now();
    event->cv.notify_all();
  });
  if (err != cudaSuccess) {
    std::lock_guard lock(event->mutex);
    event->completed = std::max(event->completed, generation);  // nothing will complete it
  }
  return result(err);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!valid_event(event)) return result(cudaErrorInvalidResourceHandle);
  if (capture_event_pending(event)) return result(cudaErrorCapturedEvent);
  std::lock_guard lock(event->mutex);
  return result(event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!valid_event(event)) return result(cudaErrorInvalidResourceHandle);
  if (capture_event_pending(event)) return result(cudaErrorCapturedEvent);
  if (const cudaError_t err = capture_unsafe_call()) return result(err);
  count_host_synchronization();
  std::unique_lock lock(event->mutex);
  const uint64_t target = event->recorded;
  event->cv.wait(lock, [&] { return event->completed >= target; });
  return result(cudaSuccess);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t handle, unsigned) {
  const std::shared_ptr<CUevent_st> event = find_event(handle);
  if (!event) return result(cudaErrorInvalidResourceHandle);
  CUstream_st* s = live_stream(stream);
  if (!s) return result(cudaErrorInvalidResourceHandle);
  if (const auto captured = capture_event_wait(handle, s)) return result(*captured);
  uint64_t target = 0;
  {
    std::lock_guard lock(event->mutex);
    target = event->recorded;  // the most recent record at the time of the call, as specified
  }
  if (target == 0) return result(cudaSuccess);
  return result(enqueue(stream, [event, target] {
    std::unique_lock lock(event->mutex);
    event->cv.wait(lock, [&] { return event->completed >= target; });
  }));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!valid_event(start) || !valid_event(end)) return result(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return result(cudaErrorInvalidResourceHandle);
  std::scoped_lock lock(start->mutex, end->mutex);
  if (start->recorded == 0 || end->recorded == 0) return result(cudaErrorInvalidResourceHandle);
  if (start->completed < start->recorded || end->completed < end->recorded)
    return result(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return result(cudaSuccess);
}
