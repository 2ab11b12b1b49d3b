// Experiment: SpscRing against the textbook SPSC queue (bench/reference_spsc.h), 8-byte items,
// both sides busy-spinning on try_push / try_pop, producer and consumer pinned to two different
// cores. Many short trials, the two designs alternating (A B, B A, A B, ...: each pair runs both
// back to back, and which goes first alternates), so a neighbour's burst of load hits both alike.
// Per design: median, best and coefficient of variation of M items/s; per pair: the ratio
// echelon / reference, and the median of those ratios (the number to quote). --same-thread runs
// each trial on one thread instead (push a burst of 256, pop it back): no core-to-core traffic,
// only the fast paths' instructions.
// Usage: exp_ring_pair [--trials N] [--items N] [--capacity N] [--cores A,B] [--same-thread]
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <echelon/data/ring.h>

#include "bench/driver_args.h"
#include "bench/reference_spsc.h"

namespace {

using Clock = std::chrono::steady_clock;
using echelon::bench::ReferenceSpsc;
using echelon::data::SpscRing;

long involuntary_switches() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_nivcsw;
}

bool pin(int core) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(core, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// One two-thread trial: M items/s from the start signal to the consumer's last pop. Thread start
// and queue construction are outside the timed window.
// Failed try_push / try_pop calls per item in the last two-thread trial: tells the regime (a
// consumer that keeps finding the ring empty runs in lockstep with the producer, one cache-line
// round trip per item; a producer that keeps finding it full, the other way round).
// `clean`: neither thread was preempted (no involuntary context switch) during the timed loop; on
// a shared machine only those trials measure the queues rather than the neighbours.
struct Polls {
  double empty = 0, full = 0;
  bool clean = false;
};
Polls g_polls;

template <typename Queue>
double spin_trial(int64_t items, size_t capacity, int producer_core, int consumer_core) {
  // On the heap (aligned new): on the stack its lines would neighbour this frame's variables.
  const auto owner = std::make_unique<Queue>(capacity);
  Queue& queue = *owner;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  int64_t full_polls = 0, empty_polls = 0;
  long producer_switches = 0;
  std::thread producer([&] {
    pin(producer_core);
    ready.fetch_add(1);
    while (!go.load(std::memory_order_acquire)) {
    }
    int64_t full = 0;
    const long switches = involuntary_switches();
    for (int64_t i = 0; i < items; ++i) {
      uint64_t value = static_cast<uint64_t>(i);
      while (!queue.try_push(value)) ++full;
    }
    producer_switches = involuntary_switches() - switches;
    full_polls = full;
  });
  pin(consumer_core);
  while (ready.load() == 0) {
  }
  const long switches = involuntary_switches();
  const Clock::time_point start = Clock::now();
  go.store(true, std::memory_order_release);
  uint64_t sum = 0;
  for (int64_t i = 0; i < items; ++i) {
    std::optional<uint64_t> value;
    while (!(value = queue.try_pop())) ++empty_polls;
    sum += *value;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const long consumer_switches = involuntary_switches() - switches;
  producer.join();
  g_polls = {static_cast<double>(empty_polls) / static_cast<double>(items),
             static_cast<double>(full_polls) / static_cast<double>(items),
             consumer_switches == 0 && producer_switches == 0};
  const uint64_t n = static_cast<uint64_t>(items);
  if (sum != n * (n - 1) / 2) {
    std::fprintf(stderr, "exp_ring_pair: wrong sum %llu\n", static_cast<unsigned long long>(sum));
    std::exit(1);
  }
  return static_cast<double>(items) / seconds / 1e6;
}

// One-thread trial: bursts of 256 pushes then 256 pops, `items` in all.
template <typename Queue>
double same_thread_trial(int64_t items, size_t capacity, int core) {
  constexpr int kBurst = 256;
  const auto owner = std::make_unique<Queue>(capacity);
  Queue& queue = *owner;
  pin(core);
  uint64_t sum = 0;
  const Clock::time_point start = Clock::now();
  for (int64_t done = 0; done < items; done += kBurst) {
    for (int i = 0; i < kBurst; ++i) {
      uint64_t value = static_cast<uint64_t>(i);
      queue.try_push(value);
    }
    for (int i = 0; i < kBurst; ++i) sum += *queue.try_pop();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (sum != static_cast<uint64_t>(items / kBurst) * (kBurst * (kBurst - 1) / 2)) std::exit(1);
  return static_cast<double>(items) / seconds / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))];
}
double cv(const std::vector<double>& v) {
  double mean = 0, var = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  for (double x : v) var += (x - mean) * (x - mean);
  return std::sqrt(var / static_cast<double>(v.size())) / mean;
}

}  // namespace

int main(int argc, char** argv) {
  int trials = 40;
  int64_t items = 1 << 20;
  size_t capacity = 1024;
  std::vector<int> cores{0, 1};
  bool same_thread = false;
  CLI::App app{"SpscRing vs the textbook SPSC queue, interleaved pinned trials", "exp_ring_pair"};
  app.option_defaults()->always_capture_default();
  app.add_option("--trials", trials, "Pairs of trials (one per design each)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--items", items, "Items per trial")
      ->check(CLI::Range(int64_t{1024}, int64_t{1} << 34));
  app.add_option("--capacity", capacity, "Queue slots (a power of two)")
      ->check(CLI::Range(2, 1 << 24));
  app.add_option("--cores", cores, "Producer core, consumer core")->expected(2)->delimiter(',');
  app.add_flag("--same-thread", same_thread, "One thread: push 256, pop 256 (fast path cost)");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  if ((capacity & (capacity - 1)) != 0 || (same_thread && capacity < 256)) {
    std::fprintf(stderr,
                 "exp_ring_pair: error: --capacity must be a power of two (>= 256 with "
                 "--same-thread)\n");
    return 2;
  }
  const auto run = [&](bool echelon) {
    if (same_thread)
      return echelon ? same_thread_trial<SpscRing<uint64_t>>(items, capacity, cores[1])
                     : same_thread_trial<ReferenceSpsc<uint64_t>>(items, capacity, cores[1]);
    return echelon ? spin_trial<SpscRing<uint64_t>>(items, capacity, cores[0], cores[1])
                   : spin_trial<ReferenceSpsc<uint64_t>>(items, capacity, cores[0], cores[1]);
  };
  run(true);  // warm-up: page faults, membarrier registration, frequency
  run(false);
  std::vector<double> ours, reference, ratios, empty[2], full[2];
  std::vector<double> clean_ours, clean_reference, clean_ratios;
  for (int t = 0; t < trials; ++t) {
    const bool echelon_first = t % 2 == 0;
    const double first = run(echelon_first);
    empty[echelon_first].push_back(g_polls.empty);
    full[echelon_first].push_back(g_polls.full);
    const bool first_clean = g_polls.clean;
    const double second = run(!echelon_first);
    empty[!echelon_first].push_back(g_polls.empty);
    full[!echelon_first].push_back(g_polls.full);
    ours.push_back(echelon_first ? first : second);
    reference.push_back(echelon_first ? second : first);
    ratios.push_back(ours.back() / reference.back());
    if (same_thread || (first_clean && g_polls.clean)) {
      clean_ours.push_back(ours.back());
      clean_reference.push_back(reference.back());
      clean_ratios.push_back(ratios.back());
    }
  }
  std::printf("%s, 8-byte items, capacity %zu, %lld items per trial, %d pairs, cores %d,%d\n",
              same_thread ? "same thread (push 256, pop 256)" : "two threads, busy-spin", capacity,
              static_cast<long long>(items), trials, cores[0], cores[1]);
  std::printf(
      "| design | median M/s | best M/s | CV | failed pops / item | failed pushes / item |\n"
      "|---|---|---|---|---|---|\n");
  std::printf("| echelon SpscRing | %.1f | %.1f | %.0f%% | %.2f | %.2f |\n", median(ours),
              *std::max_element(ours.begin(), ours.end()), 100 * cv(ours), median(empty[1]),
              median(full[1]));
  std::printf("| reference | %.1f | %.1f | %.0f%% | %.2f | %.2f |\n", median(reference),
              *std::max_element(reference.begin(), reference.end()), 100 * cv(reference),
              median(empty[0]), median(full[0]));
  std::printf(
      "pair ratio echelon/reference: median %.3f (quartiles %.3f-%.3f), best/best %.3f, "
      "pairs >= 1: %d of %d\n",
      median(ratios), quantile(ratios, 0.25), quantile(ratios, 0.75),
      *std::max_element(ours.begin(), ours.end()) /
          *std::max_element(reference.begin(), reference.end()),
      static_cast<int>(
          std::count_if(ratios.begin(), ratios.end(), [](double r) { return r >= 1; })),
      trials);
  if (!same_thread && !clean_ratios.empty())
    std::printf(
        "clean pairs (no involuntary context switch on either thread in either trial): %zu of %d; "
        "echelon median %.1f (CV %.0f%%), reference median %.1f (CV %.0f%%), pair ratio median "
        "%.3f (quartiles %.3f-%.3f)\n",
        clean_ratios.size(), trials, median(clean_ours), 100 * cv(clean_ours),
        median(clean_reference), 100 * cv(clean_reference), median(clean_ratios),
        quantile(clean_ratios, 0.25), quantile(clean_ratios, 0.75));
  return 0;
}
