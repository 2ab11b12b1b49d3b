// `echelon train --trace FILE` for every engine: one Chrome trace holding, on one clock, the data
// loader's workers per stage, each partition's forward/backward/step (and send/receive when
// pipelined), the trainer's waits for batches, evaluation, checkpoint writes and the epoch.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <echelon/base/json.h>

#include "tests/support/cli_run.h"

namespace fs = std::filesystem;

using echelon::json::Value;
using echelon::test::kBinary;
using echelon::test::run;
using echelon::test::Run;
using echelon::test::temp_dir;

namespace {

struct Span {
  std::string name;
  double start = 0, end = 0;
};

struct Trace {
  std::map<int64_t, std::string> processes;                        // pid -> name
  std::map<std::pair<int64_t, int64_t>, std::string> threads;      // (pid, tid) -> name
  std::map<std::pair<int64_t, int64_t>, std::vector<Span>> spans;  // per track, in file order
  std::set<std::string> names;                                     // of the complete events
};

Trace read_trace(const fs::path& path) {
  Trace t;
  const Value file = echelon::json::parse_file(path.string());
  for (const Value& e : file.at("traceEvents").as_array()) {
    const std::string ph = e.at("ph").as_string();
    const int64_t pid = e.at("pid").as_int();
    if (ph == "M" && e.at("name").as_string() == "process_name")
      t.processes[pid] = e.at("args").at("name").as_string();
    if (ph == "M" && e.at("name").as_string() == "thread_name")
      t.threads[{pid, e.at("tid").as_int()}] = e.at("args").at("name").as_string();
    if (ph != "X") continue;
    const double ts = e.at("ts").as_double();
    const std::string name = e.at("name").as_string();
    t.spans[{pid, e.at("tid").as_int()}].push_back({name, ts, ts + e.at("dur").as_double()});
    t.names.insert(name.substr(0, name.find(' ')));
  }
  return t;
}

bool has_process(const Trace& t, const std::string& name) {
  for (const auto& [pid, process] : t.processes)
    if (process == name) return true;
  return false;
}

void check_trace(const Trace& t, int partitions) {
  for (int k = 0; k < partitions; ++k) CHECK(has_process(t, "partition " + std::to_string(k)));
  CHECK(has_process(t, "data loader"));
  CHECK(has_process(t, "trainer"));
  for (const char* kind : {"F", "B", "step", "read", "decode", "augment", "shuffle", "batch",
                           "next", "eval", "checkpoint", "epoch"})
    CHECK_MESSAGE(t.names.count(kind) == 1, kind);
  if (partitions > 1) CHECK(t.names.count("send") == 1);
  // The epoch span, on the trainer's clock, holds every other event: one clock for all tracks.
  const Span* epoch = nullptr;
  for (const auto& [track, spans] : t.spans)
    for (const Span& s : spans)
      if (s.name == "epoch 1") epoch = &s;
  REQUIRE(epoch != nullptr);
  for (const auto& [track, spans] : t.spans) {
    CHECK_MESSAGE(t.threads.count(track) == 1, "a track without a name");
    std::vector<Span> sorted = spans;
    std::sort(sorted.begin(), sorted.end(), [](const Span& a, const Span& b) {
      return a.start < b.start || (a.start == b.start && a.end > b.end);
    });
    std::vector<double> open;  // ends of the spans enclosing the current one
    for (size_t i = 0; i < sorted.size(); ++i) {
      CHECK(sorted[i].start >= 0);
      CHECK(sorted[i].end >= sorted[i].start);
      // On one track spans nest: each lies after, or wholly inside, the ones before it.
      while (!open.empty() && open.back() <= sorted[i].start + 1e-3) open.pop_back();
      if (!open.empty()) CHECK(sorted[i].end <= open.back() + 1e-3);
      open.push_back(sorted[i].end);
      if (sorted[i].name == "epoch 1") continue;
      CHECK(sorted[i].start >= epoch->start - 1e-3);
      CHECK(sorted[i].end <= epoch->end + 1e-3);
    }
  }
}

}  // namespace

TEST_SUITE("cli_trace") {
  TEST_CASE("--trace: loader stages, partitions, trainer, eval and checkpoint on one clock") {
    if (!fs::exists(kBinary)) return;
    for (const int partitions : {1, 2}) {
      CAPTURE(partitions);
      const fs::path dir = temp_dir("trace_" + std::to_string(partitions));
      const Run r =
          run("train --model lenet5 --data synthetic --limit-train 64 --limit-test 32 --epochs 1 "
              "--batch-size 16 --workers 2 --shuffle-buffer 8 --device cpu --progress none "
              "--pipeline " +
              std::to_string(partitions) + " --trace " + (dir / "trace.json").string() + " --out " +
              (dir / "run").string());
      REQUIRE_MESSAGE(r.status == 0, r.err);
      check_trace(read_trace(dir / "trace.json"), partitions);
    }
  }
}
