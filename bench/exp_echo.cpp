// Experiment: data echoing speedup. A synthetic upstream (read cost slept, so it needs no CPU)
// is R times slower than a consumer with a fixed per-batch cost (also slept). For each R and
// echo factor e, the wall time to a fixed number of consumer steps; speedup over e = 1 beside the
// ideal min(e, R), and echo = auto. Each cell runs `reps` times; the table shows the median time
// (sleeps overshoot on a loaded machine, so single runs are noisy).
// Usage: exp_echo [steps] [batch_ms] [reps]   (exp_echo --help)
#include <algorithm>
#include <cstdio>
#include <string>

#include <echelon/app/reproduce.h>

#include "bench/driver_args.h"

using echelon::app::reproduce::echo_speed;
using echelon::app::reproduce::EchoSpeedRun;

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
    const double base = echo_speed(r, 1, false, steps, batch_ms, reps).seconds;
    for (double e : {1.0, 2.0, 3.0, 4.0}) {
      const EchoSpeedRun result =
          e == 1 ? EchoSpeedRun{base, 1, 1, 0} : echo_speed(r, e, false, steps, batch_ms, reps);
      const double ideal = std::min(e, r);
      std::printf("| %.0f | %.0f | %.2f | %.2f | %.0f | %.2f | %s |\n", r, e, result.seconds,
                  base / result.seconds, ideal, base / result.seconds / ideal,
                  e == 1 ? "-" : std::to_string(result.measured_ratio).substr(0, 4).c_str());
    }
    const EchoSpeedRun automatic = echo_speed(r, 1, true, steps, batch_ms, reps);
    std::printf(
        "| %.0f | auto (%.2f after batch 2, %.2f at the end) | %.2f | %.2f | %.0f | %.2f | %.2f "
        "|\n",
        r, automatic.first_factor, automatic.factor, automatic.seconds, base / automatic.seconds, r,
        base / automatic.seconds / r, automatic.measured_ratio);
  }
  return 0;
}
