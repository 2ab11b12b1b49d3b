// Shared by the CPU kernel drivers (exp_conv_cpu, exp_norm_cpu): thread CPU time, a median over
// repeated calls, and seeded random inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

namespace echelon::bench {

// This thread's CPU time in milliseconds: a kernel's own cost, whatever else the machine runs.
inline double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

// The median CPU time of fn(call) over `repeats` calls after `warm` untimed ones; `call` counts
// all calls from 0 (a driver rotating over input sets uses it to pick one).
inline double median_ms(int repeats, int warm, const std::function<void(int)>& fn) {
  for (int i = 0; i < warm; ++i) fn(i);
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const double start = thread_cpu_ms();
    fn(warm + i);
    ms.push_back(thread_cpu_ms() - start);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// `n` values uniform in [-1, 1), the same for the same seed.
inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace echelon::bench
