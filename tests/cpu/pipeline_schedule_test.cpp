// Pure pipeline logic: schedules, placement vectors, the balancing DP, the simulator, transports
// and the Chrome trace writer. No model involved.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/parallel/balance.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/schedule.h>
#include <echelon/parallel/trace.h>
#include <echelon/parallel/transport.h>

using namespace echelon;
using namespace echelon::parallel;

namespace {
// Replays a stage program the way a Stage executes it, counting weight versions: the staleness of
// each backward is (updates before it) - (updates before its forward).
std::vector<int64_t> replay_staleness(const StagePolicy& policy, int64_t num_batches) {
  std::vector<int64_t> at_forward(num_batches), staleness(num_batches);
  int64_t version = 0;
  for (const StageOp& op : stage_program(policy, num_batches)) {
    if (op.kind == StageOp::Kind::Forward) at_forward[op.id] = version;
    if (op.kind == StageOp::Kind::Backward) {
      staleness[op.id] = policy.stash_weights ? 0 : version - at_forward[op.id];
      if (policy.update_per_backward) ++version;
    }
  }
  return staleness;
}

// Brute force over all placements: the least possible slowest partition.
double brute_force_max(const std::vector<double>& cost, int parts) {
  const int n = static_cast<int>(cost.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> cuts(parts - 1);
  std::function<void(int, int)> place = [&](int index, int from) {
    if (index == parts - 1) {
      double worst = 0;
      int begin = 0;
      for (int k = 0; k < parts; ++k) {
        const int end = k + 1 < parts ? cuts[k] : n;
        double sum = 0;
        for (int i = begin; i < end; ++i) sum += cost[i];
        worst = std::max(worst, sum);
        begin = end;
      }
      best = std::min(best, worst);
      return;
    }
    for (int c = from; c <= n - (parts - 1 - index); ++c) {
      cuts[index] = c;
      place(index + 1, c + 1);
    }
  };
  place(0, 1);
  return best;
}
}  // namespace

TEST_SUITE("pipeline_schedule") {
  TEST_CASE("schedule names round-trip and bad names are rejected") {
    for (auto kind : {ScheduleKind::Sequential, ScheduleKind::Stale, ScheduleKind::Stash,
                      ScheduleKind::GPipe, ScheduleKind::Hybrid}) {
      CHECK(parse_schedule(schedule_name(kind)) == kind);
    }
    CHECK_THROWS_WITH_AS(parse_schedule("pipedream"), doctest::Contains("pipedream"), Error);
  }

  TEST_CASE("next_op: forward while the window has room, then the oldest backward, drained last") {
    StagePolicy policy;
    policy.window = 2;
    CHECK(next_op(policy, 0, true) == NextOp::Forward);
    CHECK(next_op(policy, 1, true) == NextOp::Forward);
    CHECK(next_op(policy, 2, true) == NextOp::Backward);
    // A flush has arrived: no more forwards, backwards until nothing is in flight.
    CHECK(next_op(policy, 2, false) == NextOp::Backward);
    CHECK(next_op(policy, 1, false) == NextOp::Backward);
    CHECK(next_op(policy, 0, false) == NextOp::Drained);
  }

  TEST_CASE("stale program is 1F1B with K - k warm-up forwards") {
    const StagePolicy first = stage_policy(ScheduleKind::Stale, 3, 0);
    CHECK(first.window == 3);
    using K = StageOp::Kind;
    const std::vector<StageOp> expected = {
        {K::Forward, 0},  {K::Forward, 1}, {K::Forward, 2},  {K::Backward, 0}, {K::Forward, 3},
        {K::Backward, 1}, {K::Forward, 4}, {K::Backward, 2}, {K::Backward, 3}, {K::Backward, 4}};
    CHECK(stage_program(first, 5) == expected);
    const StagePolicy gpipe = stage_policy(ScheduleKind::GPipe, 3, 2, 4);
    const std::vector<StageOp> program = stage_program(gpipe, 4);
    CHECK(program.size() == 9);
    CHECK(program.back().kind == K::Step);
    CHECK(program[3].kind == K::Forward);
    CHECK(program[4].kind == K::Backward);
  }

  TEST_CASE("replayed staleness equals the analytic formula") {
    for (int K = 1; K <= 5; ++K) {
      for (int k = 0; k < K; ++k) {
        for (auto kind : {ScheduleKind::Sequential, ScheduleKind::Stale, ScheduleKind::Stash,
                          ScheduleKind::GPipe}) {
          const StagePolicy policy = stage_policy(kind, K, k, 3);
          const int64_t expected = analytic_staleness(kind, K, k);
          const int64_t n = 23;
          const std::vector<int64_t> staleness = replay_staleness(policy, n);
          // Warm-up forwards see fewer updates; from mini-batch window-1 on it is steady.
          for (int64_t i = policy.window - 1; i < n; ++i) {
            if (kind == ScheduleKind::GPipe) break;  // one program = one flush
            CHECK_MESSAGE(staleness[i] == expected, "K=", K, " k=", k, " ", schedule_name(kind),
                          " batch ", i);
          }
        }
        CHECK(analytic_staleness(ScheduleKind::Stale, K, k) == K - 1 - k);
        CHECK(analytic_staleness(ScheduleKind::Stash, K, k) == 0);
        CHECK(analytic_staleness(ScheduleKind::GPipe, K, k) == 0);
      }
    }
  }

  TEST_CASE("simulator: stale pipelining approaches K-fold throughput, sequential does not") {
    const int K = 4;
    const std::vector<double> fwd = {1.0, 1.0, 1.0, 1.0}, bwd = {2.0, 2.0, 2.0, 2.0};
    std::vector<StagePolicy> stale, sequential;
    for (int k = 0; k < K; ++k) {
      stale.push_back(stage_policy(ScheduleKind::Stale, K, k));
      sequential.push_back(stage_policy(ScheduleKind::Sequential, K, k));
    }
    const int64_t n = 200;
    const SimulationResult pipelined = simulate(stale, fwd, bwd, n);
    const SimulationResult plain = simulate(sequential, fwd, bwd, n);
    CHECK(plain.makespan == doctest::Approx(n * 12.0));
    CHECK(plain.bubble_fraction() == doctest::Approx(0.75));
    // Steady state: one mini-batch per 3 time units after a fill of about one round trip.
    CHECK(pipelined.makespan == doctest::Approx(n * 3.0 + 9.0));
    CHECK(pipelined.bubble_fraction() < 0.05);
  }

  TEST_CASE("placement vectors parse, validate and cut") {
    CHECK(parse_ppv("2") == std::vector<int64_t>{2});
    CHECK(parse_ppv("2,5") == std::vector<int64_t>{2, 5});
    CHECK(format_ppv({2, 5}) == "2,5");
    CHECK_THROWS_WITH_AS(parse_ppv("5,2"), doctest::Contains("rise"), Error);
    CHECK_THROWS_WITH_AS(parse_ppv("2,,5"), doctest::Contains("empty"), Error);
    CHECK_THROWS_WITH_AS(parse_ppv("a"), doctest::Contains("not a layer index"), Error);
    CHECK_THROWS_AS(parse_ppv(""), Error);
    CHECK_THROWS_AS(parse_ppv("3,"), Error);
    const auto ranges = ranges_from_cuts({2, 5}, 8);
    REQUIRE(ranges.size() == 3);
    CHECK(ranges[0] == LayerRange{0, 2});
    CHECK(ranges[1] == LayerRange{2, 5});
    CHECK(ranges[2] == LayerRange{5, 8});
    CHECK_THROWS_WITH_AS(ranges_from_cuts({8}, 8), doctest::Contains("8 layers"), Error);
    CHECK(even_cuts(7, 3) == std::vector<int64_t>{2, 4});
    CHECK_THROWS_AS(even_cuts(2, 3), Error);
  }

  TEST_CASE("balance DP equals brute force on random costs") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<double> uniform(0.1, 5.0);
    for (int trial = 0; trial < 40; ++trial) {
      const int n = 3 + trial % 8;
      std::vector<double> cost(n);
      for (double& c : cost) c = uniform(rng);
      for (int parts = 1; parts <= std::min(n, 4); ++parts) {
        const BalanceResult result = balance_partitions(cost, parts);
        CHECK(result.cuts.size() == static_cast<size_t>(parts - 1));
        CHECK(result.max_cost == doctest::Approx(brute_force_max(cost, parts)));
        double total = 0;
        for (double c : result.partition_cost) total += c;
        double expected_total = 0;
        for (double c : cost) expected_total += c;
        CHECK(total == doctest::Approx(expected_total));
      }
    }
  }

  TEST_CASE("balance DP: a dominant layer sits alone; memory breaks ties") {
    const BalanceResult alone = balance_partitions({1, 1, 9, 1, 1}, 3);
    CHECK(alone.max_cost == doctest::Approx(9));
    CHECK(alone.partition_cost[1] == doctest::Approx(9));
    // {1, 2, 1} into 2: cutting at 1 or at 2 both give 3. Early partitions hold more
    // mini-batches, so the split that puts less memory early wins.
    const BalanceResult light_first = balance_partitions({1, 2, 1}, 2, {100, 10, 10});
    CHECK(light_first.cuts == std::vector<int64_t>{1});
    // {2, 1, 1, 2} into 3 parts with max 2 has one split, {2}{1,1}{2}: memory never overrides
    // the optimum.
    const BalanceResult forced = balance_partitions({2, 1, 1, 2}, 3, {1, 1000, 1000, 1});
    CHECK(forced.cuts == std::vector<int64_t>{1, 3});
    CHECK_THROWS_AS(balance_partitions({1, 2}, 3), Error);
    CHECK_THROWS_AS(balance_partitions({1, -2}, 1), Error);
  }

  TEST_CASE("ring transport: FIFO across threads, close wakes a blocked receiver") {
    auto ring = make_transport(Device::cpu(), Device::cpu(), 2);
    CHECK(ring->kind() == "ring");
    std::thread producer([&] {
      for (int i = 0; i < 1000; ++i) {
        Message m;
        m.id = i;
        ring->send(std::move(m));
      }
    });
    for (int i = 0; i < 1000; ++i) {
      auto m = ring->recv();
      REQUIRE(m.has_value());
      CHECK(m->id == i);
    }
    producer.join();
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ring->close();
    });
    CHECK_FALSE(ring->recv().has_value());
    closer.join();
    CHECK_FALSE(ring->send(Message{}));
  }

  TEST_CASE("transports: try_recv never blocks; a closed transport delivers nothing it buffered") {
    std::unique_ptr<Transport> channels[] = {make_transport(Device::cpu(), Device::cpu(), 3),
                                             make_local_transport(1)};
    for (auto& channel : channels) {
      CHECK(channel->kind() == "ring");
      CHECK_FALSE(channel->try_recv().has_value());
      Message m;
      m.id = 7;
      REQUIRE(channel->send(m));
      const std::optional<Message> got = channel->try_recv();
      REQUIRE(got.has_value());
      CHECK(got->id == 7);
      REQUIRE(channel->send(m));
      channel->close();
      CHECK_FALSE(channel->recv().has_value());
      CHECK_FALSE(channel->try_recv().has_value());
      CHECK_FALSE(channel->send(m));
    }
  }

  TEST_CASE("Chrome trace: valid JSON, complete events that never overlap on a track") {
    TraceRecorder recorder(2);
    const auto t0 = TraceRecorder::Clock::now();
    for (int i = 0; i < 5; ++i) {
      const auto start = t0 + std::chrono::microseconds(100 * i);
      recorder.record(i % 2, TraceTrack::Compute, "F " + std::to_string(i), start,
                      start + std::chrono::microseconds(60), i);
      recorder.record(i % 2, TraceTrack::Send, "send act " + std::to_string(i),
                      start + std::chrono::microseconds(60), start + std::chrono::microseconds(70),
                      i);
    }
    const json::Value trace = json::parse(recorder.to_json());
    const json::Array& events = trace.at("traceEvents").as_array();
    int complete = 0;
    std::map<std::pair<int64_t, int64_t>, double> track_end;
    for (const json::Value& e : events) {
      if (e.at("ph").as_string() != "X") continue;
      ++complete;
      const auto track = std::make_pair(e.at("pid").as_int(), e.at("tid").as_int());
      const double start = e.at("ts").as_double();
      CHECK(start >= track_end[track]);
      track_end[track] = start + e.at("dur").as_double();
    }
    CHECK(complete == 10);
    CHECK(events.size() == 10 + 2 * 4);  // process + 3 thread names per partition
  }
}
