// Ring buffers: single-thread semantics (FIFO, wrap-around, full/empty, close, move-only types)
// and multi-thread stress (SPSC order over 10^7 items, MPMC 4x4 exactly-once).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/ring.h>

using echelon::data::MpmcRing;
using echelon::data::SpscRing;

namespace {

template <typename Ring>
void check_single_thread_semantics() {
  Ring ring(5);  // rounded up to 8
  CHECK(ring.capacity() == 8);
  CHECK_FALSE(ring.try_pop().has_value());
  // Several laps with odd batch sizes exercise the wrap-around of the indices.
  int next_in = 0, next_out = 0;
  for (int lap = 0; lap < 13; ++lap) {
    const int n = 1 + lap % 8;
    for (int i = 0; i < n; ++i) REQUIRE(ring.try_push(next_in++));
    CHECK(ring.size() == static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto v = ring.try_pop();
      REQUIRE(v.has_value());
      CHECK(*v == next_out++);
    }
    CHECK_FALSE(ring.try_pop().has_value());
  }
  // Full: the 9th push fails and leaves the value alone.
  for (int i = 0; i < 8; ++i) REQUIRE(ring.try_push(100 + i));
  int extra = 999;
  CHECK_FALSE(ring.try_push(extra));
  CHECK(extra == 999);
  CHECK(*ring.try_pop() == 100);
  CHECK(ring.try_push(extra));
  // Close: pushes fail, the consumer drains the rest, then sees end-of-stream.
  ring.close();
  CHECK_FALSE(ring.try_push(1));
  CHECK_FALSE(ring.push(1));
  std::vector<int> drained;
  while (auto v = ring.pop()) drained.push_back(*v);
  CHECK(drained == std::vector<int>{101, 102, 103, 104, 105, 106, 107, 999});
  CHECK_FALSE(ring.pop().has_value());
}

template <typename Ring>
void check_move_only() {
  Ring ring(4);
  for (int i = 0; i < 3; ++i) REQUIRE(ring.try_push(std::make_unique<int>(i * 7)));
  auto first = ring.pop();
  REQUIRE(first.has_value());
  CHECK(**first == 0);
  // The ring's destructor frees the two items still inside (ASan/valgrind would see a leak).
}

}  // namespace

TEST_SUITE("ring") {
  TEST_CASE("spsc: FIFO, wrap-around, full, empty, close") {
    check_single_thread_semantics<SpscRing<int>>();
  }
  TEST_CASE("mpmc: FIFO, wrap-around, full, empty, close") {
    check_single_thread_semantics<MpmcRing<int>>();
  }
  TEST_CASE("move-only element types") {
    check_move_only<SpscRing<std::unique_ptr<int>>>();
    check_move_only<MpmcRing<std::unique_ptr<int>>>();
  }
  TEST_CASE("bad capacity is an error naming the ring") {
    CHECK_THROWS_WITH_AS(SpscRing<int>(0), doctest::Contains("SpscRing"), echelon::Error);
    CHECK_THROWS_WITH_AS(MpmcRing<int>(size_t{1} << 31), doctest::Contains("MpmcRing"),
                         echelon::Error);
  }
}

TEST_SUITE("concurrency_ring") {
  TEST_CASE("spsc: 10^7 items arrive in order") {
    constexpr uint64_t kItems = 10'000'000;
    SpscRing<uint64_t> ring(1024);
    uint64_t failed_pushes = 0;
    std::thread producer([&] {
      for (uint64_t i = 0; i < kItems; ++i) failed_pushes += !ring.push(i * 3 + 1);
      ring.close();
    });
    uint64_t expected = 0, mismatches = 0;
    while (auto v = ring.pop()) {
      if (*v != expected * 3 + 1) ++mismatches;
      ++expected;
    }
    producer.join();
    CHECK(failed_pushes == 0);
    CHECK(mismatches == 0);
    CHECK(expected == kItems);
  }

  TEST_CASE("spsc: a consumer parked on an empty ring wakes on close") {
    SpscRing<int> ring(8);
    std::atomic<bool> done{false};
    std::thread consumer([&] {
      CHECK_FALSE(ring.pop().has_value());
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it park
    CHECK_FALSE(done.load());
    ring.close();
    consumer.join();
    CHECK(done.load());
  }

  TEST_CASE("mpmc: 4 producers x 4 consumers, every item exactly once") {
    constexpr int kProducers = 4, kConsumers = 4;
    constexpr int64_t kPerProducer = 200'003;
    MpmcRing<int64_t> ring(61);
    std::vector<std::vector<int64_t>> received(kConsumers);
    std::atomic<int> producers_left{kProducers};
    std::atomic<int64_t> failed_pushes{0};
    std::vector<std::thread> threads;
    for (int p = 0; p < kProducers; ++p) {
      threads.emplace_back([&, p] {
        for (int64_t i = 0; i < kPerProducer; ++i)
          if (!ring.push(p * kPerProducer + i)) ++failed_pushes;
        if (producers_left.fetch_sub(1) == 1) ring.close();  // the last producer closes
      });
    }
    for (int c = 0; c < kConsumers; ++c) {
      threads.emplace_back([&, c] {
        while (auto v = ring.pop()) received[c].push_back(*v);
      });
    }
    for (auto& t : threads) t.join();
    CHECK(failed_pushes.load() == 0);
    std::vector<int64_t> all;
    for (auto& r : received) all.insert(all.end(), r.begin(), r.end());
    REQUIRE(all.size() == static_cast<size_t>(kProducers * kPerProducer));
    std::sort(all.begin(), all.end());
    int64_t wrong = 0;
    for (size_t i = 0; i < all.size(); ++i) wrong += all[i] != static_cast<int64_t>(i);
    CHECK(wrong == 0);
    // Each producer's items reach each consumer in the order they were pushed.
    for (auto& r : received) {
      std::vector<int64_t> last(kProducers, -1);
      int64_t out_of_order = 0;
      for (int64_t v : r) {
        const int64_t p = v / kPerProducer;
        out_of_order += v <= last[p];
        last[p] = v;
      }
      CHECK(out_of_order == 0);
    }
  }

  TEST_CASE("mpmc: producers blocked on a full ring wake on close") {
    MpmcRing<int> ring(2);
    REQUIRE(ring.try_push(1));
    REQUIRE(ring.try_push(2));
    std::vector<std::thread> producers;
    std::atomic<int> failed{0};
    for (int i = 0; i < 3; ++i) producers.emplace_back([&] { failed += ring.push(3) ? 0 : 1; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ring.close();
    for (auto& t : producers) t.join();
    CHECK(failed.load() == 3);
    CHECK(*ring.pop() == 1);
    CHECK(*ring.pop() == 2);
    CHECK_FALSE(ring.pop().has_value());
  }
}
