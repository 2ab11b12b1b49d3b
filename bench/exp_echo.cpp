// Experiment: data echoing speedup. A synthetic upstream (read cost slept, so it needs no CPU)
// is R times slower than a consumer with a fixed per-batch cost (also slept). For each R and
// echo factor e, the wall time to a fixed number of consumer steps; speedup over e = 1 beside the
// ideal min(e, R), and echo = auto. Each cell runs `reps` times; the table shows the median time
// (sleeps overshoot on a loaded machine, so single runs are noisy).
// Usage: exp_echo [steps] [batch_ms] [reps]   (exp_echo --help)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <echelon/data/loader.h>

#include "bench/driver_args.h"

using namespace echelon::data;

namespace {

struct Run {
  double seconds = 0;
  double factor = 0;        // at the end of the run
  double first_factor = 0;  // after the 2nd batch: auto's first estimate
  double measured_r = 0;
};

Run run(double r, double e, bool automatic, int steps, double batch_ms) {
  constexpr int kBatch = 16, kWorkers = 2;
  // Consumer: kBatch items per batch_ms. Upstream: kWorkers workers, read cost t each, so
  // upstream rate = kWorkers / t = consumer rate / r.
  const double consumer_rate = kBatch / (batch_ms * 1e-3);
  SyntheticOptions data;
  data.size = 1 << 20;
  data.height = data.width = 8;
  data.read_cost_us = kWorkers / (consumer_rate / r) * 1e6;
  LoaderOptions options;
  options.batch_size = kBatch;
  options.workers = kWorkers;
  options.shuffle_buffer = 64;
  if (automatic) {
    options.echo_auto = true;
  } else {
    options.echo_factor = e;
  }
  Loader loader(make_synthetic_dataset(data), options);
  const auto start = std::chrono::steady_clock::now();
  loader.start_epoch(0);
  Run result;
  for (int step = 0; step < steps; ++step) {
    if (!loader.next()) break;
    if (step == 1) result.first_factor = loader.stats().factor;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(batch_ms));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const LoaderStats stats = loader.stats();
  result.factor = stats.factor;
  result.measured_r = stats.measured_R;
  return result;  // the loader is destroyed mid-epoch: early stop
}

// The run with the median time of `reps` runs.
Run median_run(double r, double e, bool automatic, int steps, double batch_ms, int reps) {
  std::vector<Run> runs;
  for (int i = 0; i < reps; ++i) runs.push_back(run(r, e, automatic, steps, batch_ms));
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 150;
  double batch_ms = 8.0;
  int reps = 3;
  CLI::App app{"Data echoing speedup vs the ideal min(e, R) on a synthetic slow upstream",
               "exp_echo"};
  app.option_defaults()->always_capture_default();
  app.add_option("steps", steps, "Consumer steps per run")->check(CLI::Range(1, 1000000));
  app.add_option("batch_ms", batch_ms, "Consumer cost per batch (ms, slept)")
      ->check(CLI::Range(0.01, 10000.0));
  app.add_option("reps", reps, "Runs per cell (the median is shown)")->check(CLI::Range(1, 1000));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  std::printf(
      "steps=%d batch=16 consumer=%.1f ms/batch workers=2 placement=after-augment "
      "shuffle_buffer=64, median of %d runs\n\n",
      steps, batch_ms, reps);
  std::printf("| R | e | time (s) | speedup | ideal min(e,R) | speedup/ideal | measured R |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (double r : {1.0, 2.0, 4.0}) {
    const double base = median_run(r, 1, false, steps, batch_ms, reps).seconds;
    for (double e : {1.0, 2.0, 3.0, 4.0}) {
      const Run result =
          e == 1 ? Run{base, 1, 1, 0} : median_run(r, e, false, steps, batch_ms, reps);
      const double ideal = std::min(e, r);
      std::printf("| %.0f | %.0f | %.2f | %.2f | %.0f | %.2f | %s |\n", r, e, result.seconds,
                  base / result.seconds, ideal, base / result.seconds / ideal,
                  e == 1 ? "-" : std::to_string(result.measured_r).substr(0, 4).c_str());
    }
    const Run automatic = median_run(r, 1, true, steps, batch_ms, reps);
    std::printf(
        "| %.0f | auto (%.2f after batch 2, %.2f at the end) | %.2f | %.2f | %.0f | %.2f | %.2f "
        "|\n",
        r, automatic.first_factor, automatic.factor, automatic.seconds, base / automatic.seconds, r,
        base / automatic.seconds / r, automatic.measured_r);
  }
  return 0;
}
