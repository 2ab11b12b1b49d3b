// Timing of repeated work, for the `echelon bench` microbenchmarks and the layer profiler of
// --balance auto: warm-up rounds that are not timed, then `repeats` timed rounds summarised by
// their median and spread (quartiles, min, max), as torch.utils.benchmark and Google Benchmark
// report them. On CUDA every round is bracketed by events on the device's current stream and the
// host waits for the end event, so a round's time is the device's, not the launch's.
#pragma once

#include <functional>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/tensor/device.h>

namespace echelon::parallel {

// Seconds of `repeats` timed rounds.
struct TimingStats {
  int repeats = 0;
  double median_s = 0, q1_s = 0, q3_s = 0, min_s = 0, max_s = 0, mean_s = 0;
  double iqr_s() const { return q3_s - q1_s; }
  // {"repeats", "median_ms", "iqr_ms", "q1_ms", "q3_ms", "min_ms", "max_ms", "mean_ms"}
  json::Value to_json() const;
};

// Median, quartiles (linear interpolation between order statistics), extremes and mean of
// `seconds`; all zero when empty.
TimingStats summarize(std::vector<double> seconds);

// Waits until the work queued on `device`'s current stream has finished (no-op on CPU).
void synchronize(Device device);

// Wall time of `fn` between two points where `device` is idle (synchronize before and after).
double time_once(const std::function<void()>& fn, Device device);

// Runs `fn` `warmup` times untimed, then `repeats` timed rounds (events on CUDA).
TimingStats time_repeated(const std::function<void()>& fn, Device device, int warmup, int repeats);

}  // namespace echelon::parallel
