// Ring throughput, items/s through a bounded queue of 1024 slots, against two peers built here:
//  - ReferenceSpsc (bench/reference_spsc.h): the textbook fastest single-producer queue (two
//    separated indices, each side's cached copy of the other's, acquire/release only; no close, no
//    parking);
//  - MutexQueue: one mutex + two condition variables (what a lock-free ring must beat).
// Modes: "spin" = both sides busy-spin on try_push/try_pop (the reference's only mode);
// "block" = push/pop (spin, yield, park) with close() ending the stream. Threads are pinned to
// distinct cores when there are enough (ECHELON_BENCH_PIN=0 turns pinning off).
// Payload: 8-byte items (and 4 KiB for the SPSC rows, where the copy dominates).
#include <benchmark/benchmark.h>
#include <pthread.h>
#include <sched.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <echelon/base/env.h>
#include <echelon/data/ring.h>

#include "reference_spsc.h"

namespace {

using echelon::bench::ReferenceSpsc;
using echelon::data::MpmcRing;
using echelon::data::SpscRing;
using echelon::data::WakeCheck;

constexpr size_t kCapacity = 1024;

// The ring as the loader builds its batch rings: a full fence per publish instead of membarrier
// when parking (data/ring.h, WakeCheck::Fenced); the rows show what that costs a busy ring.
template <typename T>
struct FencedSpscRing : SpscRing<T> {
  explicit FencedSpscRing(size_t capacity) : SpscRing<T>(capacity, WakeCheck::Fenced) {}
};

// Bounded queue guarded by one mutex and two condition variables.
template <typename T>
class MutexQueue {
 public:
  explicit MutexQueue(size_t capacity) : capacity_(capacity) {}
  bool push(T value) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || closed_; });
    if (closed_) return false;
    items_.push_back(std::move(value));
    not_empty_.notify_one();
    return true;
  }
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    T value = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return value;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  bool closed_ = false;
};

void pin_to_core(int index) {
  if (!echelon::env::flag("ECHELON_BENCH_PIN", true)) return;
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores < 2) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<unsigned>(index) % cores, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

template <typename T>
T item(int64_t i) {
  T value{};
  if constexpr (std::is_integral_v<T>)
    value = static_cast<T>(i);
  else
    value[0] = static_cast<uint64_t>(i);
  return value;
}
template <typename T>
uint64_t key(const T& value) {
  if constexpr (std::is_integral_v<T>)
    return value;
  else
    return value[0];
}

// Both sides busy-spin on try_push / try_pop; the consumer knows the count (no close needed).
template <typename Queue, typename T>
void spin_1x1(benchmark::State& state) {
  const int64_t items = state.range(0);
  for (auto _ : state) {
    Queue queue(kCapacity);
    std::thread producer([&] {
      pin_to_core(0);
      for (int64_t i = 0; i < items; ++i) {
        T value = item<T>(i);
        while (!queue.try_push(value)) {
        }
      }
    });
    pin_to_core(1);
    uint64_t sum = 0;
    for (int64_t i = 0; i < items; ++i) {
      std::optional<T> value;
      while (!(value = queue.try_pop())) {
      }
      sum += key(*value);
    }
    benchmark::DoNotOptimize(sum);
    producer.join();
  }
  state.SetItemsProcessed(state.iterations() * items);
}

// Blocking push/pop, `producers` x `consumers` threads; the last producer closes the queue.
template <typename Queue, typename T>
void block_pxc(benchmark::State& state, int producers, int consumers) {
  const int64_t items = state.range(0) / producers * producers;
  for (auto _ : state) {
    Queue queue(kCapacity);
    std::atomic<int> producers_left{producers};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
      threads.emplace_back([&, p] {
        pin_to_core(2 * p);
        for (int64_t i = 0; i < items / producers; ++i) queue.push(item<T>(i));
        if (producers_left.fetch_sub(1) == 1) queue.close();
      });
    for (int c = 0; c < consumers; ++c)
      threads.emplace_back([&, c] {
        pin_to_core(2 * c + 1);
        uint64_t sum = 0;
        while (auto v = queue.pop()) sum += key(*v);
        benchmark::DoNotOptimize(sum);
      });
    for (auto& t : threads) t.join();
  }
  state.SetItemsProcessed(state.iterations() * items);
}

// One thread pushes a burst of 256 and pops it back: no second core, no cache-line transfer, so
// this isolates the instructions of the fast path (fences, extra loads) from scheduling noise.
template <typename Queue, typename T>
void same_thread(benchmark::State& state) {
  constexpr int kBurst = 256;
  Queue queue(kCapacity);
  uint64_t sum = 0;
  for (auto _ : state) {
    for (int i = 0; i < kBurst; ++i) {
      T value = item<T>(i);
      queue.try_push(value);
    }
    for (int i = 0; i < kBurst; ++i) sum += key(*queue.try_pop());
  }
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * kBurst);
}

template <typename Queue, typename T>
void block_1x1(benchmark::State& state) {
  block_pxc<Queue, T>(state, 1, 1);
}
template <typename Queue, typename T>
void block_2x2(benchmark::State& state) {
  block_pxc<Queue, T>(state, 2, 2);
}

using Small = uint64_t;
using Large = std::array<uint64_t, 512>;  // 4 KiB
constexpr int64_t kSmallItems = 1 << 22, kLargeItems = 1 << 16;

#define RING_BENCH(fn, queue, type, label, n) \
  BENCHMARK(fn<queue<type>, type>)->Name(label)->Arg(n)->UseRealTime()->MeasureProcessCPUTime()

BENCHMARK(same_thread<ReferenceSpsc<Small>, Small>)->Name("spsc_same_thread/8B/reference");
BENCHMARK(same_thread<SpscRing<Small>, Small>)->Name("spsc_same_thread/8B/echelon");
BENCHMARK(same_thread<FencedSpscRing<Small>, Small>)->Name("spsc_same_thread/8B/echelon-fenced");
BENCHMARK(same_thread<MpmcRing<Small>, Small>)->Name("mpmc_same_thread/8B/echelon");
RING_BENCH(spin_1x1, ReferenceSpsc, Small, "spsc_spin/8B/reference", kSmallItems);
RING_BENCH(spin_1x1, SpscRing, Small, "spsc_spin/8B/echelon", kSmallItems);
RING_BENCH(spin_1x1, FencedSpscRing, Small, "spsc_spin/8B/echelon-fenced", kSmallItems);
RING_BENCH(block_1x1, SpscRing, Small, "spsc_block/8B/echelon", kSmallItems);
RING_BENCH(block_1x1, MutexQueue, Small, "spsc_block/8B/mutex", kSmallItems / 4);
RING_BENCH(spin_1x1, ReferenceSpsc, Large, "spsc_spin/4KiB/reference", kLargeItems);
RING_BENCH(spin_1x1, SpscRing, Large, "spsc_spin/4KiB/echelon", kLargeItems);
RING_BENCH(block_1x1, MpmcRing, Small, "mpmc_1x1/8B/echelon", kSmallItems / 4);
RING_BENCH(block_1x1, MutexQueue, Small, "mpmc_1x1/8B/mutex", kSmallItems / 4);
RING_BENCH(block_2x2, MpmcRing, Small, "mpmc_2x2/8B/echelon", kSmallItems / 4);
RING_BENCH(block_2x2, MutexQueue, Small, "mpmc_2x2/8B/mutex", kSmallItems / 4);

}  // namespace

BENCHMARK_MAIN();
