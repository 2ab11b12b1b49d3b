// The fast path's thread pool: N-1 persistent workers that spin briefly after each job (a step
// launches dozens of short jobs; a futex wake-up per job would cost more than the job) and then
// sleep on a condition variable. One job at a time; a caller that finds the pool busy runs the
// same chunks inline, so results never depend on which thread ran what.
#include <echelon/tensor/cpu/fast/parallel.h>

#include <echelon/base/thread_name.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace echelon::cpu::fast {
namespace {

using ChunkFn = std::function<void(int64_t, int64_t, int64_t)>;

// How long an idle worker polls for the next job before it sleeps.
constexpr auto kSpin = std::chrono::microseconds(300);

// Chunks per pool thread. More chunks than threads, claimed dynamically, let the threads that
// run finish the work of one that was preempted (by the loader's stage threads, another process)
// instead of waiting for it: with one chunk per thread every op waits for its slowest thread.
constexpr int64_t kChunksPerThread = 4;

// parallel_for's chunks are guided: each takes 1 / (2 T) of what is left, at least the grain and
// 1/64 of the range, so they shrink towards the end and the threads finish within a small chunk
// of each other. With 4T equal chunks the caller waited half a chunk per op on average (1/16 of
// the op at 2 threads: 8% of a two-thread ResNet-20 step). At most kMaxGuided chunks (a cap that
// 64 threads would reach; the last chunk then takes the rest).
constexpr int64_t kMaxGuided = 64;

// One parallel_for call; lives on the caller's stack until every worker has left it.
struct Job {
  const ChunkFn* fn = nullptr;
  int64_t n = 0, chunks = 0;
  const int64_t* bounds = nullptr;  // chunk c is [bounds[c], bounds[c + 1]); null: chunk_range
  std::atomic<int64_t> next{0};     // next unclaimed chunk
  std::atomic<int64_t> done{0};     // chunks finished
  std::atomic<int> active{0};       // workers inside this job
  std::mutex error_mutex;
  std::exception_ptr error;

  // Claims and runs chunks until none is left.
  void work() {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      int64_t begin = 0, end = 0;
      range_of(c, &begin, &end);
      try {
        (*fn)(c, begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void range_of(int64_t c, int64_t* begin, int64_t* end) const {
    if (bounds) {
      *begin = bounds[c];
      *end = bounds[c + 1];
    } else {
      chunk_range(n, chunks, c, begin, end);
    }
  }
};

// Guided chunk boundaries of [0, n) for `threads` threads into bounds (kMaxGuided + 1 entries);
// returns the chunk count. A function of (n, grain, threads) only.
int64_t guided_bounds(int64_t n, int64_t grain, int64_t threads, int64_t* bounds) {
  const int64_t smallest = std::max({grain, (n + 63) / 64, int64_t{1}});
  int64_t chunks = 0;
  bounds[0] = 0;
  for (int64_t begin = 0; begin < n;) {
    const int64_t size = chunks + 1 == kMaxGuided
                             ? n - begin
                             : std::max(smallest, (n - begin + 2 * threads - 1) / (2 * threads));
    begin = std::min(n, begin + size);
    bounds[++chunks] = begin;
  }
  return chunks;
}

thread_local bool t_inside_pool_task = false;

class Pool {
 public:
  ~Pool() { resize(1); }

  void resize(int threads) {
    std::lock_guard<std::mutex> busy(busy_);
    stop_workers();
    threads_.store(std::max(threads, 1));
    for (int i = 1; i < threads_.load(); ++i) {
      workers_.emplace_back([this] { worker_loop(); });
      set_thread_name(workers_.back(), "ech-pool-" + std::to_string(i));
    }
  }
  int threads() const { return threads_.load(); }

  // bounds: null (chunk_range's equal chunks) or the chunks' boundaries.
  void run(int64_t n, int64_t chunks, const int64_t* bounds, const ChunkFn& fn) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    Job job;
    job.fn = &fn;
    job.n = n;
    job.chunks = chunks;
    job.bounds = bounds;
    if (chunks <= 1 || t_inside_pool_task || !busy.owns_lock() || workers_.empty()) {
      run_inline(job);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    t_inside_pool_task = true;
    job.work();
    t_inside_pool_task = false;
    while (job.done.load(std::memory_order_acquire) < chunks) std::this_thread::yield();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = nullptr;  // late workers now find nothing; those inside are counted in `active`
    }
    while (job.active.load(std::memory_order_acquire) > 0) std::this_thread::yield();
    if (job.error) std::rethrow_exception(job.error);
  }

 private:
  static void run_inline(const Job& job) {
    for (int64_t c = 0; c < job.chunks; ++c) {
      int64_t begin = 0, end = 0;
      job.range_of(c, &begin, &end);
      (*job.fn)(c, begin, end);
    }
  }

  void worker_loop() {
    t_inside_pool_task = true;  // a task that calls parallel_for runs it inline
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto spin_until = std::chrono::steady_clock::now() + kSpin;
      while (generation_.load(std::memory_order_acquire) == seen && !stop_.load() &&
             std::chrono::steady_clock::now() < spin_until)
        std::this_thread::yield();
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_.load() || generation_.load() != seen; });
        if (stop_.load()) return;
        seen = generation_.load();
        job = job_;
        if (job) job->active.fetch_add(1);
      }
      if (!job) continue;
      job->work();
      job->active.fetch_sub(1, std::memory_order_release);
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false);
  }

  std::mutex busy_;   // held by the one caller whose job the workers serve
  std::mutex mutex_;  // guards job_ and the generation's change
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::atomic<int> threads_{1};
  Job* job_ = nullptr;
  std::vector<std::thread> workers_;
};

Pool& pool() {
  // Never destroyed: worker threads must not outlive a destroyed pool at exit.
  static Pool* instance = new Pool();
  return *instance;
}

}  // namespace

void set_num_threads(int threads) {
  if (std::max(threads, 1) != pool().threads()) pool().resize(threads);
}

int num_threads() {
  return pool().threads();
}

int64_t chunk_count(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  const int64_t by_grain = (n + std::max<int64_t>(grain, 1) - 1) / std::max<int64_t>(grain, 1);
  const int64_t threads = pool().threads();
  const int64_t most = threads > 1 ? threads * kChunksPerThread : 1;
  return std::max<int64_t>(1, std::min<int64_t>(by_grain, most));
}

void chunk_range(int64_t n, int64_t chunks, int64_t index, int64_t* begin, int64_t* end) {
  // Sizes differ by at most one: the first n % chunks chunks take one more item.
  const int64_t base = n / chunks, extra = n % chunks;
  *begin = index * base + std::min(index, extra);
  *end = *begin + base + (index < extra ? 1 : 0);
}

void parallel_chunks(int64_t n, int64_t grain, const ChunkFn& fn) {
  const int64_t chunks = chunk_count(n, grain);
  if (chunks == 0) return;
  pool().run(n, chunks, nullptr, fn);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const ChunkFn by_range = [&fn](int64_t, int64_t begin, int64_t end) { fn(begin, end); };
  const int64_t threads = pool().threads();
  if (threads == 1 || n <= std::max<int64_t>(grain, 1)) {
    pool().run(n, 1, nullptr, by_range);
    return;
  }
  int64_t bounds[kMaxGuided + 1];
  const int64_t chunks = guided_bounds(n, std::max<int64_t>(grain, 1), threads, bounds);
  pool().run(n, chunks, bounds, by_range);
}

}  // namespace echelon::cpu::fast
