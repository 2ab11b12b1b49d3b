// merge_rank_traces: the traces of a multi-process run as one timeline (the mpirun run itself is
// checked by tests/mpi/cli_check.sh with tests/mpi/trace_check.py).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/parallel/trace.h>
#include <echelon/parallel/trace_merge.h>

using namespace echelon;
using parallel::TraceRecorder;
using parallel::TraceTrack;

namespace {

// A 2-partition trace of one rank that ran only `partition`, one forward at [start, start + 5) us.
std::string rank_trace(int partition, double start_us) {
  TraceRecorder trace(2);
  const auto origin = TraceRecorder::Clock::now() - std::chrono::microseconds(int64_t{1000});
  const auto at = [&](double us) {
    return origin + std::chrono::duration_cast<TraceRecorder::Clock::duration>(
                        std::chrono::duration<double, std::micro>(us));
  };
  trace.record(partition, TraceTrack::Compute, "F 0", at(start_us), at(start_us + 5), 0);
  return trace.to_json();
}

const json::Value* find_event(const json::Value& merged, const std::string& name, int64_t pid) {
  for (const json::Value& e : merged.at("traceEvents").as_array()) {
    const json::Value* args = e.find("args");
    const bool named = e.at("name").as_string() == name ||
                       (args && args->find("name") && args->at("name").is_string() &&
                        args->at("name").as_string() == name);
    if (named && e.at("pid").as_int() == pid) return &e;
  }
  return nullptr;
}

}  // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("rank traces merge into one timeline: a process per rank, one clock") {
    const std::string rank0 = rank_trace(0, 10), rank1 = rank_trace(1, 40);
    const json::Value merged = json::parse(parallel::merge_rank_traces({rank0, rank1}, {0, 250}));
    const json::Value* f0 = find_event(merged, "F 0", 0);
    const json::Value* f1 = find_event(merged, "F 0", parallel::kRankPidStride + 1);
    REQUIRE(f0 != nullptr);
    REQUIRE(f1 != nullptr);
    // Rank 1's events move by its offset; rank 0's stay.
    const double own0 = json::parse(rank0).at("traceEvents").as_array().back().at("ts").as_double();
    const double own1 = json::parse(rank1).at("traceEvents").as_array().back().at("ts").as_double();
    CHECK(f0->at("ts").as_double() == doctest::Approx(own0));
    CHECK(f1->at("ts").as_double() == doctest::Approx(own1 + 250));
    // Process names say the rank; each rank keeps only the partition it ran.
    CHECK(find_event(merged, "rank 0: partition 0", 0) != nullptr);
    CHECK(find_event(merged, "rank 1: partition 1", parallel::kRankPidStride + 1) != nullptr);
    CHECK(find_event(merged, "rank 0: partition 1", 1) == nullptr);
    CHECK(find_event(merged, "rank 1: partition 0", parallel::kRankPidStride) == nullptr);
  }

  TEST_CASE("a rank whose text is not a trace is named") {
    CHECK_THROWS_WITH_AS(parallel::merge_rank_traces({rank_trace(0, 1), "{\"x\": 1}"}, {0, 0}),
                         doctest::Contains("trace of rank 1: no traceEvents array"), Error);
    CHECK_THROWS_WITH_AS(parallel::merge_rank_traces({"[1,"}, {0}),
                         doctest::Contains("trace of rank 0"), Error);
    CHECK_THROWS_AS(parallel::merge_rank_traces({rank_trace(0, 1)}, {0, 0}), Error);
  }
}
