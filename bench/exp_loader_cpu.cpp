// Experiment: the loader's own CPU per batch while a simulated training step keeps the cores busy.
// Issue 13's epoch goal (epoch / step >= 0.95 at 2 op threads on 2 cores) is lost to whatever CPU
// the loader's threads take from the step; this driver measures that CPU directly, without the
// step's own noise: the consumer busy-spins --step-us of its thread's CPU per batch (the step),
// and --busy-threads more threads spin for the whole epoch (the op pool's other threads). Loader
// CPU = process CPU - the steps' and the spinners' CPU, per batch (inline: next()'s work
// included); voluntary context switches per batch count the loader threads' sleeps (the consumer
// and the spinners never sleep while batches are ready). Each round runs the --workers values one
// after another; the table gives each one's median round.
// Usage: exp_loader_cpu [--workers 0 1] [--images N] [--step-us U] [--busy-threads T]
//                       [--rounds R] [--epochs E] [--data-dir DIR]
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <echelon/data/loader.h>
#include <echelon/data/registry.h>

#include "bench/driver_args.h"

using namespace echelon;

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

struct Usage {
  double cpu_s = 0;
  int64_t voluntary = 0, involuntary = 0;
};
Usage process_usage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime), usage.ru_nvcsw, usage.ru_nivcsw};
}

// Spins until this thread has used `seconds` of CPU; returns the CPU it used.
double spin_for_thread_cpu(double seconds) {
  const double start = thread_cpu_seconds();
  double now = start;
  while (now < start + seconds) now = thread_cpu_seconds();
  return now - start;
}

struct EpochCost {
  double loader_us_per_batch = 0;  // CPU of everything but the steps and the spinners
  double sleeps_per_batch = 0;     // voluntary context switches
  double wall_s = 0;
};

// `epochs` epochs through one loader (the first one's start-up included, as in training).
EpochCost run(const data::DatasetSplits& data, int workers, int epochs, double step_s,
              int busy_threads) {
  data::LoaderOptions options;
  options.batch_size = 64;
  options.workers = workers;
  options.seed = 1;
  options.augment = data.train_augment;
  data::Loader loader(data.train, options);
  std::atomic<bool> running{true};
  std::vector<double> spinner_cpu(static_cast<size_t>(busy_threads), 0.0);
  std::vector<std::thread> spinners;
  const Usage before = process_usage();
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < busy_threads; ++t)
    spinners.emplace_back([&, t] {
      while (running.load(std::memory_order_relaxed)) {
      }
      spinner_cpu[static_cast<size_t>(t)] = thread_cpu_seconds();
    });
  double step_cpu = 0;  // the consumer's steps only: the inline loader runs inside next()
  int64_t batches = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      step_cpu += spin_for_thread_cpu(step_s);
      ++batches;
    }
  }
  running = false;
  for (auto& t : spinners) t.join();
  const Usage after = process_usage();
  double others = step_cpu;
  for (double s : spinner_cpu) others += s;
  const auto n = static_cast<double>(batches);
  return {(after.cpu_s - before.cpu_s - others) / n * 1e6,
          static_cast<double>(after.voluntary - before.voluntary) / n,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> workers{0, 1};
  int64_t images = 6400;
  double step_us = 2300;
  int busy_threads = 1, rounds = 5, epochs = 2;
  std::string data_dir;
  CLI::App app{"The loader's CPU per batch of 64 under a simulated training step"};
  app.add_option("--workers", workers, "loader workers per stage, one column each (0: inline)")
      ->check(CLI::Range(0, 16));
  app.add_option("--images", images, "Fashion-MNIST training images per epoch")
      ->check(CLI::Range(64, 60000));
  app.add_option("--step-us", step_us, "consumer CPU per batch (the simulated step), us")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--busy-threads", busy_threads, "threads spinning all epoch (the op pool)")
      ->check(CLI::Range(0, 16));
  app.add_option("--rounds", rounds, "alternating rounds (median kept)")->check(CLI::Range(1, 99));
  app.add_option("--epochs", epochs, "epochs per measurement")->check(CLI::Range(1, 100));
  app.add_option("--data-dir", data_dir, "Fashion-MNIST folder (default: Debian's)");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  const data::DatasetSplits data =
      data::load_dataset("fashion-mnist", data_dir, {.train = images, .test = 1});
  std::printf(
      "loader CPU per batch of 64 (us, all but the consumer's step and the spinners), voluntary "
      "context switches per batch; %lld images x %d epochs, step %.0f us, %d busy threads\n",
      static_cast<long long>(images), epochs, step_us, busy_threads);
  std::vector<std::vector<double>> cpu(workers.size()), sleeps(workers.size());
  for (int r = 0; r < rounds; ++r) {
    std::printf("round %d:", r + 1);
    for (size_t w = 0; w < workers.size(); ++w) {
      const EpochCost cost = run(data, workers[w], epochs, step_us * 1e-6, busy_threads);
      cpu[w].push_back(cost.loader_us_per_batch);
      sleeps[w].push_back(cost.sleeps_per_batch);
      std::printf("  workers %d: %.1f us, %.1f sleeps, %.2f s", workers[w],
                  cost.loader_us_per_batch, cost.sleeps_per_batch, cost.wall_s);
    }
    std::printf("\n");
  }
  for (size_t w = 0; w < workers.size(); ++w)
    std::printf("median, workers %d: %.1f us CPU per batch, %.1f sleeps per batch\n", workers[w],
                median(cpu[w]), median(sleeps[w]));
  return 0;
}
