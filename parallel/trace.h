// Chrome trace (about://tracing, ui.perfetto.dev) of a training run, on one clock: one process per
// partition with three tracks — compute (forward/backward/step), send and receive — and named
// tracks beside them (add_track): the data loader's workers per stage, the trainer's waits for
// batches, evaluation and checkpoint writes. Every event is a complete ("X") event; a track is
// written by one thread only, so its events never overlap and nest trivially.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <echelon/base/json.h>

namespace echelon::parallel {

enum class TraceTrack : uint8_t { Compute = 0, Send = 1, Receive = 2 };

struct TraceEvent {
  int partition = 0;
  TraceTrack track = TraceTrack::Compute;
  std::string name;     // "F 12", "B 12", "step", "send act 12", ...
  double start_us = 0;  // since the recorder's origin
  double duration_us = 0;
  int64_t id = -1;       // mini-batch id (item index on loader tracks), -1 for none
  int named_track = -1;  // >= 0: an add_track track (partition and track are then unused)
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  // Keeps at most max_events (the first ones) so a long run cannot exhaust memory.
  explicit TraceRecorder(int num_partitions = 0, size_t max_events = 200000);
  // The pipeline knows its partition count once it has cut the model.
  void set_partitions(int num_partitions);

  void record(int partition, TraceTrack track, std::string name, Clock::time_point start,
              Clock::time_point end, int64_t id = -1);
  // A track outside the partitions: thread `thread` of process `process` (e.g. "data loader",
  // "decode 1"); the same names give the same id. Thread-safe.
  int add_track(const std::string& process, const std::string& thread);
  void record_on(int track, std::string name, Clock::time_point start, Clock::time_point end,
                 int64_t id = -1);
  std::vector<TraceEvent> events() const;  // a copy, in recording order
  size_t dropped() const;
  // The Chrome trace JSON text ({"traceEvents": [...]}, timestamps in microseconds).
  std::string to_json() const;
  // Writes to_json() to `path`; throws naming the path when it cannot be written.
  void write(const std::string& path) const;
  // Where save() writes (the engine sets it; it writes once at once to fail early).
  void set_output(const std::string& path);
  void save() const;  // write(output) when an output is set
  // Multi-process runs: save() passes to_json() through `gather` and writes what it returns
  // (rank 0: every rank's trace merged, parallel/trace_merge.h); empty = write nothing. Every
  // process calls save() at the same points, so `gather` may be a collective.
  using Gather = std::function<std::string(std::string own_json)>;
  void set_gather(Gather gather);
  double now_us() const;  // microseconds since this recorder's origin, on its clock

 private:
  int num_partitions_;
  size_t max_events_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  size_t dropped_ = 0;
  std::vector<std::pair<std::string, std::string>> tracks_;  // add_track: (process, thread)
  std::string output_;
  Gather gather_;
  void push(TraceEvent event);  // under mutex_
  // Under mutex_: the processes of the named tracks and each track's (pid, tid); then the
  // process and thread name events.
  void named_ids(std::vector<std::string>& processes,
                 std::vector<std::pair<int, int>>& where) const;
  json::Value metadata(const std::vector<std::string>& processes,
                       const std::vector<std::pair<int, int>>& where) const;
};

}  // namespace echelon::parallel
