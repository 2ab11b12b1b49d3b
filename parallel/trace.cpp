#include <echelon/parallel/trace.h>

#include <filesystem>
#include <system_error>

#include <echelon/base/error.h>
#include <echelon/base/file.h>
#include <echelon/base/json.h>
#include <echelon/tensor/safetensors.h>

namespace echelon::parallel {

TraceRecorder::TraceRecorder(int num_partitions, size_t max_events)
    : num_partitions_(num_partitions), max_events_(max_events), origin_(Clock::now()) {}

void TraceRecorder::record(int partition, TraceTrack track, std::string name,
                           Clock::time_point start, Clock::time_point end, int64_t id) {
  const auto micros = [&](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  };
  std::lock_guard lock(mutex_);
  if (events_.size() >= max_events_) {
    ++dropped_;
    return;
  }
  events_.push_back(
      {partition, track, std::move(name), micros(start), micros(end) - micros(start), id});
}

std::vector<TraceEvent> TraceRecorder::events() const {
  std::lock_guard lock(mutex_);
  return events_;
}

size_t TraceRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

std::string TraceRecorder::to_json() const {
  static const char* kTrackNames[] = {"compute", "send", "receive"};
  json::Value events = json::Value::array();
  for (int k = 0; k < num_partitions_; ++k) {
    events.push(json::Value::object()
                    .set("name", "process_name")
                    .set("ph", "M")
                    .set("pid", k)
                    .set("args", json::Value::object().set("name", str("partition ", k))));
    for (int track = 0; track < 3; ++track) {
      events.push(json::Value::object()
                      .set("name", "thread_name")
                      .set("ph", "M")
                      .set("pid", k)
                      .set("tid", track)
                      .set("args", json::Value::object().set("name", kTrackNames[track])));
    }
  }
  for (const TraceEvent& event : this->events()) {
    json::Value args = json::Value::object();
    if (event.id >= 0) args.set("batch", event.id);
    events.push(json::Value::object()
                    .set("name", event.name)
                    .set("ph", "X")
                    .set("pid", event.partition)
                    .set("tid", static_cast<int>(event.track))
                    .set("ts", event.start_us)
                    .set("dur", event.duration_us)
                    .set("args", std::move(args)));
  }
  return json::Value::object()
      .set("traceEvents", std::move(events))
      .set("displayTimeUnit", "ms")
      .dump();
}

void TraceRecorder::write(const std::string& path) const {
  // Rewritten every epoch: atomically, so a viewer opening it mid-run never sees a torn file.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  ECH_CHECK(!error, "trace '", path, "': cannot create the folder '", parent.string(), "': ", error.message());
  write_file_atomic(path, to_json() + "\n");
}

}  // namespace echelon::parallel
