// Ring buffers: single-thread semantics (FIFO, wrap-around, full/empty, close, move-only types),
// multi-thread stress (1P/1C SPSC and MPMC, 2P/2C, 4P/4C: nothing lost, duplicated or reordered
// per producer; 10^8 items in the slow suite), blocking on full/empty, and wake-up latency of a
// parked consumer (a lost wake-up would leave it asleep: the test would time out and fail).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/ring.h>

using echelon::data::MpmcRing;
using echelon::data::SpscRing;
using echelon::data::WakeCheck;

namespace {

// The rings with a fence per publish instead of membarrier (what the loader uses), under the
// same tests as the default.
template <typename T>
struct FencedSpsc : SpscRing<T> {
  explicit FencedSpsc(size_t capacity) : SpscRing<T>(capacity, WakeCheck::Fenced) {}
};
template <typename T>
struct FencedMpmc : MpmcRing<T> {
  explicit FencedMpmc(size_t capacity) : MpmcRing<T>(capacity, WakeCheck::Fenced) {}
};

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

// A producer parked on a full ring of 8 stays parked while the consumer pops 3 items and wakes
// (and refills the ring) once the 4th pop leaves it half full: one wake-up per half ring.
template <typename Ring>
void check_producer_wakes_at_half() {
  Ring ring(8);
  for (int i = 0; i < 8; ++i) REQUIRE(ring.try_push(i));
  std::thread producer([&] {
    for (int i = 8; i < 12; ++i) ring.push(i);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ring.parked_producers() == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  REQUIRE(ring.parked_producers() == 1);
  for (int i = 0; i < 3; ++i) CHECK(*ring.try_pop() == i);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(ring.size() == 5);  // still parked: a wake per pop would have refilled it to 8
  CHECK(*ring.try_pop() == 3);
  producer.join();  // woken at half: pushes 8..11 (a lost wake-up would hang here)
  CHECK(ring.size() == 8);
  for (int i = 4; i < 12; ++i) CHECK(*ring.try_pop() == i);
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
    check_single_thread_semantics<FencedSpsc<int>>();
  }
  TEST_CASE("mpmc: FIFO, wrap-around, full, empty, close") {
    check_single_thread_semantics<MpmcRing<int>>();
  }
  TEST_CASE("spsc: after close, a push succeeds only while there is room; pop still drains") {
    // SpscRing reads `closed` only when the ring is full (data/ring.h): no fast-path cost.
    SpscRing<int> ring(2);
    REQUIRE(ring.try_push(1));
    ring.close();
    CHECK(ring.try_push(2));  // room left: accepted, and delivered to a consumer still draining
    CHECK_FALSE(ring.try_push(3));
    CHECK_FALSE(ring.push(3));  // full and closed: fails at once instead of blocking
    CHECK(*ring.pop() == 1);
    CHECK(*ring.pop() == 2);
    CHECK_FALSE(ring.pop().has_value());
    CHECK(ring.parked_consumers() == 0);  // the fence-mode bit never shows as a sleeper
    CHECK(ring.parked_producers() == 0);
    const FencedSpsc<int> fenced(2);  // the bit is always set there
    CHECK(fenced.parked_consumers() == 0);
    CHECK(fenced.parked_producers() == 0);
  }
  TEST_CASE("move-only element types") {
    check_move_only<SpscRing<std::unique_ptr<int>>>();
    check_move_only<MpmcRing<std::unique_ptr<int>>>();
  }
  TEST_CASE("mpmc asked for one slot: nothing pushed is lost (it gets two)") {
    MpmcRing<int> ring(1);
    CHECK(ring.capacity() == 2);
    std::vector<int> pushed;
    for (int i = 0; i < 5; ++i)
      if (ring.try_push(i)) pushed.push_back(i);
    std::vector<int> popped;
    while (std::optional<int> v = ring.try_pop()) popped.push_back(*v);
    CHECK(pushed == std::vector<int>{0, 1});
    CHECK(popped == pushed);
    CHECK_THROWS_WITH_AS(MpmcRing<int>(0), doctest::Contains("MpmcRing"), echelon::Error);
  }
  TEST_CASE("bad capacity is an error naming the ring") {
    CHECK_THROWS_WITH_AS(SpscRing<int>(0), doctest::Contains("SpscRing"), echelon::Error);
    CHECK_THROWS_WITH_AS(MpmcRing<int>(size_t{1} << 31), doctest::Contains("MpmcRing"),
                         echelon::Error);
  }
}

namespace {

// Item = producer << 40 | sequence. Each consumer checks, per producer, that sequences rise (no
// reordering, no duplicate within a consumer) and marks its items in its own bitmap; afterwards
// the bitmaps must partition every item exactly once (nothing lost, nothing duplicated).
struct StressResult {
  int64_t failed_pushes = 0, out_of_order = 0, duplicates = 0, missing = 0, received = 0;
};

constexpr int kProducerShift = 40;

template <typename Ring>
StressResult stress(int producers, int consumers, int64_t per_producer, size_t capacity) {
  Ring ring(capacity);
  const int64_t total = producers * per_producer;
  std::vector<std::vector<uint64_t>> seen(consumers, std::vector<uint64_t>((total + 63) / 64));
  std::vector<StressResult> partial(consumers + 1);
  std::atomic<int> producers_left{producers};
  std::atomic<int64_t> failed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p)
    threads.emplace_back([&, p] {
      for (int64_t i = 0; i < per_producer; ++i)
        if (!ring.push((uint64_t(p) << kProducerShift) | uint64_t(i))) ++failed;
      if (producers_left.fetch_sub(1) == 1) ring.close();  // the last producer closes
    });
  for (int c = 0; c < consumers; ++c)
    threads.emplace_back([&, c] {
      std::vector<int64_t> last(producers, -1);
      StressResult& r = partial[c];
      while (auto v = ring.pop()) {
        const int p = static_cast<int>(*v >> kProducerShift);
        const int64_t i = static_cast<int64_t>(*v & ((uint64_t{1} << kProducerShift) - 1));
        r.out_of_order += i <= last[p];
        last[p] = i;
        const int64_t bit = p * per_producer + i;
        seen[c][bit / 64] |= uint64_t{1} << (bit % 64);
        ++r.received;
      }
    });
  for (auto& t : threads) t.join();
  StressResult result;
  result.failed_pushes = failed.load();
  for (const auto& r : partial) {
    result.out_of_order += r.out_of_order;
    result.received += r.received;
  }
  for (size_t word = 0; word < seen[0].size(); ++word) {
    uint64_t any = 0;
    int64_t count = 0;
    for (const auto& bits : seen) {
      any |= bits[word];
      count += std::popcount(bits[word]);
    }
    const int64_t valid = std::min<int64_t>(64, total - int64_t(word) * 64);
    result.missing += valid - std::popcount(any);
    result.duplicates += count - std::popcount(any);
  }
  return result;
}

template <typename Ring>
void check_stress(int producers, int consumers, int64_t per_producer, size_t capacity) {
  CAPTURE(producers);
  CAPTURE(consumers);
  const StressResult r = stress<Ring>(producers, consumers, per_producer, capacity);
  CHECK(r.failed_pushes == 0);
  CHECK(r.out_of_order == 0);
  CHECK(r.duplicates == 0);
  CHECK(r.missing == 0);
  CHECK(r.received == producers * per_producer);
}

// A consumer parks on an empty ring; each push must wake it within `bound`. The main thread waits
// for the consumer's report with a timeout, so a lost wake-up fails instead of hanging (checked:
// with Parker::wake() planted to do nothing it fails in seconds, 1 of 40 items popped).
template <typename Ring>
void check_wake_latency(int pushes, std::chrono::milliseconds bound) {
  using Clock = std::chrono::steady_clock;
  Ring ring(8);
  std::mutex mutex;
  std::condition_variable arrived;
  int popped = 0;
  Clock::time_point popped_at;
  std::thread consumer([&] {
    while (auto v = ring.pop()) {
      std::lock_guard<std::mutex> lock(mutex);
      popped_at = Clock::now();
      ++popped;
      arrived.notify_one();
    }
  });
  int parked_before_push = 0, late = 0;
  Clock::duration worst{};
  for (int i = 0; i < pushes; ++i) {
    // Wait (bounded) until the consumer is asleep in pop(), so the push must wake it.
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (ring.parked_consumers() == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    parked_before_push += ring.parked_consumers() >= 1;
    const Clock::time_point pushed_at = Clock::now();
    REQUIRE(ring.push(i));
    std::unique_lock<std::mutex> lock(mutex);
    if (!arrived.wait_for(lock, bound, [&] { return popped == i + 1; })) {
      ++late;
      if (!arrived.wait_for(lock, std::chrono::seconds(5), [&] { return popped == i + 1; })) break;
    }
    worst = std::max(worst, popped_at - pushed_at);
  }
  ring.close();  // also frees a consumer that missed a wake-up
  consumer.join();
  CHECK(popped == pushes);
  CHECK(late == 0);
  CHECK(parked_before_push == pushes);  // every push found the consumer asleep
  MESSAGE("worst wake-up latency ",
          std::chrono::duration_cast<std::chrono::microseconds>(worst).count(), " us");
}

}  // namespace

TEST_SUITE("concurrency_ring") {
  TEST_CASE("spsc 1P/1C: nothing lost, duplicated or reordered") {
    check_stress<SpscRing<uint64_t>>(1, 1, 2'000'003, 1024);
    check_stress<SpscRing<uint64_t>>(1, 1, 100'003, 2);  // tiny ring: parks on both sides
  }
  TEST_CASE("fenced wake check: spsc and mpmc stress, parking on both sides") {
    check_stress<FencedSpsc<uint64_t>>(1, 1, 500'009, 64);
    check_stress<FencedSpsc<uint64_t>>(1, 1, 100'003, 2);
    check_stress<FencedMpmc<uint64_t>>(2, 2, 250'007, 61);
    check_stress<FencedMpmc<uint64_t>>(4, 4, 20'011, 2);
  }
  TEST_CASE("mpmc 1P/1C, 2P/2C, 4P/4C: nothing lost, duplicated or reordered per producer") {
    check_stress<MpmcRing<uint64_t>>(1, 1, 500'009, 64);
    check_stress<MpmcRing<uint64_t>>(2, 2, 250'007, 61);
    check_stress<MpmcRing<uint64_t>>(4, 4, 125'003, 61);
    check_stress<MpmcRing<uint64_t>>(4, 4, 20'011, 2);
  }
  TEST_CASE("a parked consumer wakes within a bound after each push") {
    // The bound is loose (a loaded 2-core CI machine, TSan); a lost wake-up never arrives at all.
    check_wake_latency<SpscRing<int>>(40, std::chrono::milliseconds(1000));
    check_wake_latency<MpmcRing<int>>(40, std::chrono::milliseconds(1000));
    check_wake_latency<FencedSpsc<int>>(40, std::chrono::milliseconds(1000));
    check_wake_latency<FencedMpmc<int>>(40, std::chrono::milliseconds(1000));
  }

  TEST_CASE(
      "a producer parked on a full ring wakes when half of it is free, not at the first pop") {
    check_producer_wakes_at_half<SpscRing<int>>();
    check_producer_wakes_at_half<MpmcRing<int>>();
    check_producer_wakes_at_half<FencedSpsc<int>>();
    check_producer_wakes_at_half<FencedMpmc<int>>();
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

// 10^8 items per configuration (ctest label `slow`; minutes on a loaded 2-core machine).
TEST_SUITE("slow_ring") {
  TEST_CASE("10^8 items: spsc 1P/1C, mpmc 1P/1C, 2P/2C, 4P/4C") {
    constexpr int64_t kItems = 100'000'000;
    check_stress<SpscRing<uint64_t>>(1, 1, kItems, 1024);
    check_stress<MpmcRing<uint64_t>>(1, 1, kItems, 1024);
    check_stress<MpmcRing<uint64_t>>(2, 2, kItems / 2, 1024);
    check_stress<MpmcRing<uint64_t>>(4, 4, kItems / 4, 1024);
  }
}
