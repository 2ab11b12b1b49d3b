// Ring throughput: SPSC and MPMC lock-free rings vs a mutex + condition-variable queue, payloads
// of 8 B and 4 KiB, items/s through a producer thread and a consumer thread (MPMC: 2 x 2).
#include <benchmark/benchmark.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <echelon/data/ring.h>

namespace {

using Small = uint64_t;
using Large = std::array<uint64_t, 512>;  // 4 KiB

// The peer: a bounded queue guarded by one mutex and two condition variables.
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

template <typename Queue, typename T>
void pass_items(benchmark::State& state, int producers, int consumers) {
  const int64_t items = state.range(0);
  for (auto _ : state) {
    Queue queue(1024);
    std::atomic<int> producers_left{producers};
    std::vector<std::thread> threads;
    for (int p = 0; p < producers; ++p)
      threads.emplace_back([&] {
        T value{};
        for (int64_t i = 0; i < items / producers; ++i) {
          value[0] = static_cast<uint64_t>(i);
          queue.push(value);
        }
        if (producers_left.fetch_sub(1) == 1) queue.close();
      });
    for (int c = 0; c < consumers; ++c)
      threads.emplace_back([&] {
        uint64_t sum = 0;
        while (auto v = queue.pop()) sum += (*v)[0];
        benchmark::DoNotOptimize(sum);
      });
    for (auto& t : threads) t.join();
  }
  state.SetItemsProcessed(state.iterations() * (items / producers) * producers);
}

template <typename T>
struct Box {  // gives Small an operator[] so one driver handles both payloads
  T value{};
  uint64_t& operator[](size_t) { return value; }
  const uint64_t& operator[](size_t) const { return value; }
};

template <template <typename> class Q, typename T>
void spsc(benchmark::State& state) {
  pass_items<Q<T>, T>(state, 1, 1);
}
template <template <typename> class Q, typename T>
void mpmc(benchmark::State& state) {
  pass_items<Q<T>, T>(state, 2, 2);
}

using SmallBox = Box<Small>;

BENCHMARK(spsc<echelon::data::SpscRing, SmallBox>)
    ->Name("spsc_ring/8B")
    ->Arg(1 << 20)
    ->UseRealTime();
BENCHMARK(spsc<MutexQueue, SmallBox>)->Name("mutex_queue_1x1/8B")->Arg(1 << 20)->UseRealTime();
BENCHMARK(mpmc<echelon::data::MpmcRing, SmallBox>)
    ->Name("mpmc_ring_2x2/8B")
    ->Arg(1 << 20)
    ->UseRealTime();
BENCHMARK(mpmc<MutexQueue, SmallBox>)->Name("mutex_queue_2x2/8B")->Arg(1 << 20)->UseRealTime();
BENCHMARK(spsc<echelon::data::SpscRing, Large>)
    ->Name("spsc_ring/4KiB")
    ->Arg(1 << 16)
    ->UseRealTime();
BENCHMARK(spsc<MutexQueue, Large>)->Name("mutex_queue_1x1/4KiB")->Arg(1 << 16)->UseRealTime();
BENCHMARK(mpmc<echelon::data::MpmcRing, Large>)
    ->Name("mpmc_ring_2x2/4KiB")
    ->Arg(1 << 16)
    ->UseRealTime();
BENCHMARK(mpmc<MutexQueue, Large>)->Name("mutex_queue_2x2/4KiB")->Arg(1 << 16)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
