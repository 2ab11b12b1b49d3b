// Chrome trace (about://tracing, ui.perfetto.dev) of a pipeline run: one process per partition
// with three tracks — compute (forward/backward/step), send and receive — each a sequence of
// complete ("X") events. A track is written by one executor thread only, so its events never
// overlap and nest trivially.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace echelon::parallel {

enum class TraceTrack : uint8_t { Compute = 0, Send = 1, Receive = 2 };

struct TraceEvent {
  int partition = 0;
  TraceTrack track = TraceTrack::Compute;
  std::string name;     // "F 12", "B 12", "step", "send act 12", ...
  double start_us = 0;  // since the recorder's origin
  double duration_us = 0;
  int64_t id = -1;  // mini-batch id, -1 for none
};

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  // Keeps at most max_events (the first ones) so a long run cannot exhaust memory.
  explicit TraceRecorder(int num_partitions, size_t max_events = 200000);

  void record(int partition, TraceTrack track, std::string name, Clock::time_point start,
              Clock::time_point end, int64_t id = -1);
  std::vector<TraceEvent> events() const;  // a copy, in recording order
  size_t dropped() const;
  // The Chrome trace JSON text ({"traceEvents": [...]}, timestamps in microseconds).
  std::string to_json() const;
  // Writes to_json() to `path`; throws naming the path when it cannot be written.
  void write(const std::string& path) const;

 private:
  int num_partitions_;
  size_t max_events_;
  Clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<TraceEvent> events_;
  size_t dropped_ = 0;
};

}  // namespace echelon::parallel
