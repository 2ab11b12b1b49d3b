#include <echelon/parallel/trace.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/tensor/safetensors.h>

namespace echelon::parallel {

namespace {

// Named tracks' processes get ids after any partition's: 100, 101, ... in order of appearance.
constexpr int kFirstNamedProcess = 100;

json::Value name_event(const char* kind, int pid, int tid, const std::string& name) {
  json::Value e = json::Value::object().set("name", kind).set("ph", "M").set("pid", pid);
  if (tid >= 0) e.set("tid", tid);
  return e.set("args", json::Value::object().set("name", name));
}

}  // namespace

TraceRecorder::TraceRecorder(int num_partitions, size_t max_events)
    : num_partitions_(num_partitions), max_events_(max_events), origin_(Clock::now()) {}

void TraceRecorder::set_partitions(int num_partitions) {
  std::lock_guard lock(mutex_);
  num_partitions_ = num_partitions;
}

void TraceRecorder::push(TraceEvent event) {
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(std::move(event));
}

void TraceRecorder::record(int partition, TraceTrack track, std::string name,
                           Clock::time_point start, Clock::time_point end, int64_t id) {
  const auto micros = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  std::lock_guard lock(mutex_);
  push({partition, track, std::move(name), micros(start), micros(end) - micros(start), id});
}

int TraceRecorder::add_track(const std::string& process, const std::string& thread) {
  std::lock_guard lock(mutex_);
  const auto key = std::make_pair(process, thread);
  const auto it = std::find(tracks_.begin(), tracks_.end(), key);
  if (it != tracks_.end()) return static_cast<int>(it - tracks_.begin());
  tracks_.push_back(key);
  return static_cast<int>(tracks_.size()) - 1;
}

void TraceRecorder::record_on(int track, std::string name, Clock::time_point start,
                              Clock::time_point end, int64_t id) {
  const auto micros = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  std::lock_guard lock(mutex_);
  ECH_CHECK(track >= 0 && track < static_cast<int>(tracks_.size()), "trace: unknown track ", track);
  TraceEvent event{
      0, TraceTrack::Compute, std::move(name), micros(start), micros(end) - micros(start), id};
  event.named_track = track;
  push(std::move(event));
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

size_t TraceRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void TraceRecorder::named_ids(std::vector<std::string>& processes,
                              std::vector<std::pair<int, int>>& where) const {
  std::vector<int> threads_in;
  for (const auto& [process, thread] : tracks_) {
    const size_t p = std::find(processes.begin(), processes.end(), process) - processes.begin();
    if (p == processes.size()) {
      processes.push_back(process);
      threads_in.push_back(0);
    }
    where.emplace_back(kFirstNamedProcess + static_cast<int>(p), threads_in[p]++);
  }
}

json::Value TraceRecorder::metadata(const std::vector<std::string>& processes,
                                    const std::vector<std::pair<int, int>>& where) const {
  static const char* kTrackNames[] = {"compute", "send", "receive"};
  json::Value events = json::Value::array();
  for (int k = 0; k < num_partitions_; ++k) {
    events.push(name_event("process_name", k, -1, str("partition ", k)));
    for (int track = 0; track < 3; ++track)
      events.push(name_event("thread_name", k, track, kTrackNames[track]));
  }
  for (size_t p = 0; p < processes.size(); ++p)
    events.push(
        name_event("process_name", kFirstNamedProcess + static_cast<int>(p), -1, processes[p]));
  for (size_t i = 0; i < tracks_.size(); ++i)
    events.push(name_event("thread_name", where[i].first, where[i].second, tracks_[i].second));
  return events;
}

std::string TraceRecorder::to_json() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> processes;
  std::vector<std::pair<int, int>> where;  // (pid, tid) of each named track
  named_ids(processes, where);
  json::Value events = metadata(processes, where);
  for (const TraceEvent& event : events_) {
    const bool named = event.named_track >= 0;
    json::Value args = json::Value::object();
    if (event.id >= 0) args.set(named ? "item" : "batch", event.id);
    events.push(
        json::Value::object()
            .set("name", event.name)
            .set("ph", "X")
            .set("pid", named ? where[event.named_track].first : event.partition)
            .set("tid", named ? where[event.named_track].second : static_cast<int>(event.track))
            .set("ts", event.start_us)
            .set("dur", event.duration_us)
            .set("args", std::move(args)));
  }
  return json::Value::object()
      .set("traceEvents", std::move(events))
      .set("displayTimeUnit", "ms")
      .dump();
}

namespace {

void write_trace_text(const std::string& path, const std::string& text) {
  // Rewritten every epoch: atomically, so a viewer opening it mid-run never sees a torn file.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  ECH_CHECK(!error, "trace '", path, "': cannot create the folder '", parent.string(),
            "': ", error.message());
  write_file_atomic(path, text + "\n");
}

}  // namespace

void TraceRecorder::write(const std::string& path) const {
  write_trace_text(path, to_json());
}

void TraceRecorder::set_gather(Gather gather) {
  std::lock_guard lock(mutex_);
  gather_ = std::move(gather);
}

double TraceRecorder::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

void TraceRecorder::set_output(const std::string& path) {
  {
    std::lock_guard lock(mutex_);
    output_ = path;
  }
  save();
}

void TraceRecorder::save() const {
  std::string path;
  Gather gather;
  {
    std::lock_guard lock(mutex_);
    path = output_;
    gather = gather_;
  }
  if (path.empty()) return;
  if (!gather) return write(path);
  const std::string text = gather(to_json());
  if (!text.empty()) write_trace_text(path, text);
}

}  // namespace echelon::parallel
