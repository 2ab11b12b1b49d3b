// The fast CPU path's thread pool (tensor/cpu/fast/parallel.h): its contract — every index
// covered once, guided chunks, a stalled worker delays one chunk only, exceptions reach the caller,
// nested calls run inline, concurrent callers — as a `concurrency` suite, so CI also runs it under
// ThreadSanitizer; and the caching host allocator (tensor/cpu_cache.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu_cache.h>
#include <echelon/tensor/ops.h>

#include "tests/support/fast_scope.h"

namespace echelon {
namespace {
using test::FastScope;
}  // namespace

TEST_SUITE("fast_cpu") {
  TEST_CASE("caching host allocator: freed blocks are reused, the limit bounds what it keeps") {
    const size_t limit = cpu_cache_limit();
    set_cpu_cache_limit(size_t{64} << 20);
    empty_cpu_cache();
    Allocator* alloc = cpu_allocator();
    void* p = alloc->allocate(100000);
    alloc->deallocate(p, 100000);
    CHECK(cpu_cache_stats().cached_bytes == cpu_cache_size_class(100000));
    const int64_t hits = cpu_cache_stats().hits;
    void* q = alloc->allocate(99000);  // the same size class
    CHECK(q == p);
    CHECK(cpu_cache_stats().hits == hits + 1);
    CHECK(cpu_cache_stats().cached_bytes == 0);
    alloc->deallocate(q, 99000);
    set_cpu_cache_limit(0);  // frees what it holds and keeps nothing after
    CHECK(cpu_cache_stats().cached_bytes == 0);
    void* r = alloc->allocate(4096);
    alloc->deallocate(r, 4096);
    CHECK(cpu_cache_stats().cached_bytes == 0);
    for (size_t n : {1, 63, 64, 65, 4096, 4097, 100000, 1 << 20, (1 << 20) + 1}) {
      const size_t c = cpu_cache_size_class(n);
      CHECK(c >= n);
      CHECK(c % 64 == 0);
      CHECK(c <= n + n / 8 + 64);
    }
    set_cpu_cache_limit(limit);
  }
}

TEST_SUITE("concurrency_thread_pool") {
  TEST_CASE("parallel_for covers the range once, any n and grain; chunks follow chunk_range") {
    FastScope scope(3, ops::CpuKernels::Fast);
    for (int64_t n : {0, 1, 2, 5, 64, 1000, 4099})
      for (int64_t grain : {1, 7, 100000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        cpu::fast::parallel_for(n, grain, [&](int64_t b, int64_t e) {
          CHECK(b < e);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        for (const auto& h : hits) CHECK(h.load() == 1);
        const int64_t chunks = cpu::fast::chunk_count(n, grain);
        CHECK(chunks <= 3 * 4);
        CHECK(chunks <= std::max<int64_t>(1, (n + grain - 1) / grain));
        CHECK((n == 0) == (chunks == 0));
      }
  }

  TEST_CASE(
      "more chunks than threads: a stalled worker delays one chunk, the caller runs the rest") {
    FastScope scope(2, ops::CpuKernels::Fast);
    CHECK(cpu::fast::chunk_count(8, 1) == 8);
    CHECK(cpu::fast::chunk_count(8, 3) == 3);
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<int64_t> by_caller{0}, by_worker{0};  // items
    // parallel_for's guided chunks of 8 items at 2 threads: 2, 2, 1, 1, 1, 1.
    cpu::fast::parallel_for(8, 1, [&](int64_t begin, int64_t end) {
      if (std::this_thread::get_id() == caller) {
        by_caller.fetch_add(end - begin);
      } else {
        by_worker.fetch_add(end - begin);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));  // preempted, as it were
      }
    });
    CHECK(by_caller.load() + by_worker.load() == 8);
    CHECK(by_worker.load() <= 2);  // the caller took the other chunks while the worker slept
  }

  TEST_CASE("parallel_for's chunks shrink towards the end (guided), at least the grain") {
    // Each 1 / (2 T) of what is left, at least the grain and n / 64.
    for (const int threads : {2, 3})
      for (int64_t n : {2, 9, 128, 2048, 100000})
        for (int64_t grain : {1, 16, 1000}) {
          CAPTURE(threads);
          CAPTURE(n);
          CAPTURE(grain);
          FastScope scope(threads, ops::CpuKernels::Fast);
          std::mutex mutex;
          std::vector<std::pair<int64_t, int64_t>> ranges;
          cpu::fast::parallel_for(n, grain, [&](int64_t begin, int64_t end) {
            std::lock_guard<std::mutex> lock(mutex);
            ranges.emplace_back(begin, end);
          });
          std::sort(ranges.begin(), ranges.end());
          REQUIRE(!ranges.empty());
          CHECK(ranges.front().first == 0);
          CHECK(ranges.back().second == n);
          CHECK(ranges.size() <= 64);
          for (size_t i = 0; i < ranges.size(); ++i) {
            const int64_t size = ranges[i].second - ranges[i].first;
            if (i + 1 < ranges.size()) {
              CHECK(ranges[i].second == ranges[i + 1].first);
              CHECK(size >= ranges[i + 1].second - ranges[i + 1].first);  // non-increasing
              CHECK(size >= std::max(grain, (n + 63) / 64));
            }
            CHECK(size <= std::max({grain, (n + 63) / 64, (n + 2 * threads - 1) / (2 * threads)}));
          }
          if (n >= 16 * grain * threads)  // the last chunk a small part of the work
            CHECK((ranges.back().second - ranges.back().first) * 8 <= n / threads);
        }
  }

  TEST_CASE("an exception in a task reaches the caller; nested calls run inline") {
    FastScope scope(2, ops::CpuKernels::Fast);
    CHECK_THROWS_AS(cpu::fast::parallel_for(100, 1,
                                            [](int64_t b, int64_t) {
                                              if (b == 0) throw std::runtime_error("task failed");
                                            }),
                    std::runtime_error);
    std::atomic<int64_t> total{0};
    cpu::fast::parallel_for(8, 1, [&](int64_t b, int64_t e) {
      cpu::fast::parallel_for(10, 1, [&](int64_t b2, int64_t e2) { total += (e - b) * (e2 - b2); });
    });
    CHECK(total.load() == 80);
  }

  TEST_CASE("stress: four threads share the pool (one gets it, the others run inline)") {
    FastScope scope(3, ops::CpuKernels::Fast);
    std::vector<std::thread> callers;
    std::atomic<int64_t> wrong{0};
    for (int t = 0; t < 4; ++t)
      callers.emplace_back([&wrong, t] {
        for (int round = 0; round < 300; ++round) {
          const int64_t n = 50 + (round * 7 + t) % 200;
          std::vector<int> seen(static_cast<size_t>(n), 0);
          cpu::fast::parallel_for(n, 3, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) ++seen[static_cast<size_t>(i)];
          });
          for (int v : seen) wrong += v != 1;
        }
      });
    for (std::thread& c : callers) c.join();
    CHECK(wrong.load() == 0);
  }
}

}  // namespace echelon
