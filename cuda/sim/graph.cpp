// CUDA emulation: stream capture and graphs. Why it is built this way:
// - a capture is a list of the tasks the runtime would have enqueued (kernel launches, copies,
//   memsets, host functions), in the order the host enqueued them; streams that wait on an event
//   recorded in the capture join it and append to the same list. That order respects every
//   dependency the host expressed, so a replay runs the list in order on the launch stream;
// - tasks hold the same pointers and arguments they were captured with, so a replay re-reads
//   the same device memory: changing its contents between launches changes the results, and
//   freeing it while the graph lives is the caller's bug (the caching allocator keeps a
//   capture's blocks in a private pool for that reason);
// - errors follow the real runtime: synchronising with a capturing stream, an unsafe call under
//   the capture-mode rules, waiting on an event from outside the capture, or implicit legacy
//   stream ordering invalidate the capture, and cudaStreamEndCapture then returns
//   cudaErrorStreamCaptureInvalidated and no graph.
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include <echelon/cuda/sim/internal.h>

using Tasks = std::vector<std::function<void()>>;

struct CUgraph_st {
  std::shared_ptr<const Tasks> tasks;
};
struct CUgraphExec_st {
  std::shared_ptr<const Tasks> tasks;  // shared with launches still queued
};

namespace echelon::cudasim::detail {
namespace {

struct Capture {
  CUstream_st* origin;
  cudaStreamCaptureMode mode;
  std::thread::id thread;
  int device;
  bool invalidated = false;
  Tasks tasks;
  // Per stream in the capture: tasks it recorded, and how many of them the rest of the capture
  // has waited for (an event recorded on it and waited on by another member).
  std::map<CUstream_st*, std::pair<size_t, size_t>> members;
};

struct EventMark {  // an event last recorded inside a capture
  std::shared_ptr<Capture> capture;
  CUstream_st* stream;
  size_t count;  // the stream's recorded tasks at the record
};

struct Registry {
  std::mutex mutex;
  std::map<CUstream_st*, std::shared_ptr<Capture>> capturing;
  std::map<const void*, EventMark> events;
  std::set<CUgraph_st*> graphs;
  std::set<CUgraphExec_st*> execs;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed, like the runtime's state
  return *r;
}

thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

// The captures whose rules forbid an unsafe call from this thread (CUDA's capture-mode table).
bool forbids(const Capture& c) {
  const bool mine = c.thread == std::this_thread::get_id();
  switch (t_mode) {
    case cudaStreamCaptureModeGlobal:
      return mine ? c.mode != cudaStreamCaptureModeRelaxed : c.mode == cudaStreamCaptureModeGlobal;
    case cudaStreamCaptureModeThreadLocal:
      return mine && c.mode != cudaStreamCaptureModeRelaxed;
    case cudaStreamCaptureModeRelaxed:
      return false;
  }
  return false;
}

}  // namespace

std::optional<cudaError_t> capture_task(CUstream_st* s, std::function<void()>& task) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (auto it = r.capturing.find(s); it != r.capturing.end()) {
    Capture& c = *it->second;
    if (c.invalidated) return cudaErrorStreamCaptureInvalidated;
    c.tasks.push_back(std::move(task));
    ++c.members[s].first;
    return cudaSuccess;
  }
  const StreamTraits traits = traits_of(s);
  if (!traits.legacy) return std::nullopt;
  bool implicit = false;
  for (auto& [stream, capture] : r.capturing) {
    const StreamTraits other = traits_of(stream);
    if (other.device == traits.device && other.blocking) {
      capture->invalidated = true;
      implicit = true;
    }
  }
  if (implicit) return cudaErrorStreamCaptureImplicit;
  return std::nullopt;
}

cudaError_t capture_unsafe_call() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  bool forbidden = false;
  for (auto& [stream, capture] : r.capturing)
    if (forbids(*capture)) {
      capture->invalidated = true;
      forbidden = true;
    }
  return forbidden ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

cudaError_t capture_stream_sync(CUstream_st* s) {
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (auto it = r.capturing.find(s); it != r.capturing.end()) {
      it->second->invalidated = true;
      return cudaErrorStreamCaptureUnsupported;
    }
  }
  return capture_unsafe_call();
}

std::optional<cudaError_t> capture_event_record(const void* event, CUstream_st* s) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.capturing.find(s);
  if (it == r.capturing.end()) {
    r.events.erase(event);  // an ordinary record again
    return std::nullopt;
  }
  if (it->second->invalidated) return cudaErrorStreamCaptureInvalidated;
  r.events[event] = {it->second, s, it->second->members[s].first};
  return cudaSuccess;
}

std::optional<cudaError_t> capture_event_wait(const void* event, CUstream_st* s) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto waiter = r.capturing.find(s);
  auto mark = r.events.find(event);
  if (mark == r.events.end()) {
    if (waiter == r.capturing.end()) return std::nullopt;
    // A dependency on work outside the capture: the graph could not express it.
    waiter->second->invalidated = true;
    return cudaErrorStreamCaptureIsolation;
  }
  const std::shared_ptr<Capture> capture = mark->second.capture;
  if (waiter == r.capturing.end()) {  // fork: `s` joins the capture
    r.capturing[s] = capture;
    capture->members.try_emplace(s, 0, 0);
    return capture->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
  }
  if (waiter->second != capture) {
    waiter->second->invalidated = capture->invalidated = true;
    return cudaErrorStreamCaptureMerge;
  }
  if (mark->second.stream != s) {  // join: s now depends on that stream's work so far
    size_t& waited = capture->members[mark->second.stream].second;
    waited = std::max(waited, mark->second.count);
  }
  return capture->invalidated ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}

bool capture_event_pending(const void* event) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.events.count(event) != 0;
}

}  // namespace echelon::cudasim::detail

// ---- the runtime API ---------------------------------------------------------------------------

using namespace echelon::cudasim::detail;

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  CUstream_st* s = live_stream(stream);
  if (!s) return result(cudaErrorInvalidResourceHandle);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.capturing.find(s);
  *status = it == r.capturing.end()   ? cudaStreamCaptureStatusNone
            : it->second->invalidated ? cudaStreamCaptureStatusInvalidated
                                      : cudaStreamCaptureStatusActive;
  return result(cudaSuccess);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (stream == nullptr) return result(cudaErrorStreamCaptureUnsupported);
  if (mode < cudaStreamCaptureModeGlobal || mode > cudaStreamCaptureModeRelaxed)
    return result(cudaErrorInvalidValue);
  if (!live_stream(stream)) return result(cudaErrorInvalidResourceHandle);
  const StreamTraits traits = traits_of(stream);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.capturing.count(stream)) return result(cudaErrorIllegalState);
  auto capture = std::make_shared<Capture>(
      Capture{stream, mode, std::this_thread::get_id(), traits.device, false, {}, {}});
  capture->members[stream] = {0, 0};
  r.capturing[stream] = std::move(capture);
  return result(cudaSuccess);
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.capturing.find(stream);
  if (it == r.capturing.end()) return result(cudaErrorIllegalState);
  const std::shared_ptr<Capture> capture = it->second;
  if (capture->origin != stream) {
    capture->invalidated = true;
    return result(cudaErrorStreamCaptureUnmatched);
  }
  if (capture->mode != cudaStreamCaptureModeRelaxed &&
      capture->thread != std::this_thread::get_id())
    return result(cudaErrorStreamCaptureWrongThread);
  // The capture ends for every member stream, whatever the outcome.
  for (auto m = r.capturing.begin(); m != r.capturing.end();)
    m = m->second == capture ? r.capturing.erase(m) : std::next(m);
  for (auto e = r.events.begin(); e != r.events.end();)
    e = e->second.capture == capture ? r.events.erase(e) : std::next(e);
  if (capture->invalidated) return result(cudaErrorStreamCaptureInvalidated);
  for (const auto& [member, counts] : capture->members)
    if (member != stream && counts.second < counts.first)
      return result(cudaErrorStreamCaptureUnjoined);
  *graph = new CUgraph_st{std::make_shared<const Tasks>(std::move(capture->tasks))};
  r.graphs.insert(*graph);
  return result(cudaSuccess);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (*mode < cudaStreamCaptureModeGlobal || *mode > cudaStreamCaptureModeRelaxed)
    return result(cudaErrorInvalidValue);
  std::swap(*mode, t_mode);
  return result(cudaSuccess);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  *exec = nullptr;
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.graphs.count(graph) || flags != 0) return result(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->tasks};  // later edits of the graph would not reach it
  r.execs.insert(*exec);
  return result(cudaSuccess);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::shared_ptr<const Tasks> tasks;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    if (!r.execs.count(exec)) return result(cudaErrorInvalidValue);
    tasks = exec->tasks;
  }
  return result(enqueue(stream, [tasks] {
    for (const auto& task : *tasks) task();
  }));
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.execs.erase(exec)) return result(cudaErrorInvalidValue);
  delete exec;  // queued launches keep their share of the tasks
  return result(cudaSuccess);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.graphs.erase(graph)) return result(cudaErrorInvalidValue);
  delete graph;
  return result(cudaSuccess);
}
