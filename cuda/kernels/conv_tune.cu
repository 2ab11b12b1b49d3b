// The convolution autotuner (cuda/kernels/conv_tune.h). Host code only, no kernel of its own; a
// .cu beside the launchers it drives so that tools/cudasim-mutants.sh can plant a bug in its pick.
// CPU twin of what it runs: every candidate it may pick is the convolution of tensor/cpu/conv.cpp,
// checked against it in tests/gpu/conv_tune_gpu_test.cpp (all passes, fp32/TF32/bf16).
#include <echelon/cuda/kernels/conv_tune.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include <echelon/base/error.h>
#include <echelon/cuda/check.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/cuda/switches.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "channels.cuh"

namespace echelon::cuda {
namespace {

constexpr int kTimedRuns = 3;
// A candidate whose first timed run is this much slower than the best so far is not run again.
constexpr double kClearlySlower = 2.0;

std::atomic<bool>& autotune_flag() {
  static std::atomic<bool> flag = switches::conv_autotune();
  return flag;
}

using Key = std::array<int64_t, 19>;

Key key_of(const ConvCall& c, Precision precision) {
  const Conv2dGeometry& g = c.geometry;
  return {c.device,
          static_cast<int64_t>(c.pass),
          c.grad_bias != nullptr,
          static_cast<int64_t>(precision),
          g.kernel_h,
          g.kernel_w,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          g.dilation_h,
          g.dilation_w,
          g.n,
          g.c,
          g.h,
          g.w,
          g.o,
          g.out_h,
          g.out_w};
}

struct Tuner {
  std::mutex cache_mutex;  // guards picks and order
  std::map<Key, ConvConfig> picks;
  std::vector<ConvTunePick> order;
  std::mutex tune_mutex;  // one tuning at a time: concurrent timings would disturb each other
  ConvTuneTimer timer;    // under tune_mutex
};

Tuner& tuner() {
  static Tuner t;
  return t;
}

bool empty_problem(const ConvCall& c) {
  const Conv2dGeometry& a = c.geometry;
  const int64_t plane = a.out_h * a.out_w;
  switch (c.pass) {
    case ConvPass::Forward:
      return a.n * a.o * plane == 0;
    case ConvPass::BackwardData:
      return a.n * a.c * a.h * a.w == 0 || a.o * plane == 0;
    default:
      return a.n * plane == 0 || a.o * a.c * a.kernel_h * a.kernel_w == 0;
  }
}

// A warm-up run, then up to kTimedRuns timed ones: the fastest.
double time_on_device(const ConvCall& call, const ConvConfig& config, double best_so_far) {
  return fastest_run_ms(call.stream, kTimedRuns, kClearlySlower * best_so_far,
                        [&] { run_conv(call, config); });
}

// Index of the fastest time; the first of equal ones (the heuristic comes first).
size_t fastest_of(const std::vector<double>& times) {
  size_t best = 0;
  for (size_t i = 1; i < times.size(); ++i)
    if (times[i] < times[best]) best = i;
  return best;
}

ConvTunePick tune(const ConvCall& call, Precision precision, const ConvTuneTimer& timer) {
  const ConvConfig heuristic = conv_heuristic(call.pass, call.geometry);
  std::vector<ConvConfig> candidates{heuristic};
  for (const ConvConfig& c : conv_candidates(call.pass, call.geometry))
    if (!(c == heuristic)) candidates.push_back(c);
  std::vector<double> times;
  double best_so_far = std::numeric_limits<double>::infinity();
  for (const ConvConfig& c : candidates) {
    // A candidate that cannot run here (its columns or split-K scratch does not fit in memory)
    // is skipped. The heuristic's own failure is the caller's, as it would be untuned.
    try {
      times.push_back(timer ? timer(call, c) : time_on_device(call, c, best_so_far));
    } catch (const Error&) {
      if (times.empty()) throw;
      times.push_back(std::numeric_limits<double>::infinity());
    }
    best_so_far = std::min(best_so_far, times.back());
  }
  const size_t best = fastest_of(times);
  ConvTunePick p;
  p.device = call.device;
  p.pass = call.pass;
  p.precision = precision;
  p.geometry = call.geometry;
  p.pick_config = candidates[best];
  p.heuristic_config = heuristic;
  p.pick = to_string(candidates[best]);
  p.heuristic = to_string(heuristic);
  p.tuned_ms = times[best];
  p.heuristic_ms = times.front();
  p.candidates = static_cast<int>(candidates.size());
  return p;
}

}  // namespace

void set_conv_autotune(bool on) {
  autotune_flag().store(on, std::memory_order_relaxed);
}

bool conv_autotune() {
  return autotune_flag().load(std::memory_order_relaxed);
}

ConvConfig conv_config_for(const ConvCall& call) {
  if (!conv_autotune() || conv_algorithm() != ConvAlgorithm::ImplicitGemm || empty_problem(call))
    return conv_heuristic(call.pass, call.geometry);
  const Precision precision = float32_precision();
  const Key key = key_of(call, precision);
  Tuner& t = tuner();
  const auto cached = [&]() -> std::optional<ConvConfig> {
    std::lock_guard lock(t.cache_mutex);
    const auto it = t.picks.find(key);
    return it == t.picks.end() ? std::nullopt : std::optional<ConvConfig>(it->second);
  };
  if (const std::optional<ConvConfig> pick = cached()) return *pick;
  if (stream_capturing(call.stream)) return conv_heuristic(call.pass, call.geometry);
  std::lock_guard tuning(t.tune_mutex);
  if (const std::optional<ConvConfig> pick = cached()) return *pick;  // tuned meanwhile
  ConvTunePick p;
  if (call.accumulate) {
    // Timing runs each candidate several times on call.out, which here holds the sum the call
    // adds to: the candidates run the overwriting problem on scratch instead (the same kernels
    // and config; only the store's read of out is not timed), and the sum stays untouched.
    const Conv2dGeometry& a = call.geometry;
    Scratch out(static_cast<size_t>(a.n * a.c * a.h * a.w) * sizeof(float), call.stream);
    ConvCall plain = call;
    plain.out = out.as<float>();
    plain.accumulate = false;
    p = tune(plain, precision, t.timer);
  } else {
    p = tune(call, precision, t.timer);
  }
  const ConvConfig pick = p.pick_config;
  std::lock_guard lock(t.cache_mutex);
  t.picks.emplace(key, pick);
  t.order.push_back(std::move(p));
  return pick;
}

std::vector<ConvTunePick> conv_tune_picks() {
  Tuner& t = tuner();
  std::lock_guard lock(t.cache_mutex);
  return t.order;
}

std::string describe(const Conv2dGeometry& a) {
  std::string out = "N" + std::to_string(a.n) + " C" + std::to_string(a.c) + " " +
                    std::to_string(a.h) + "x" + std::to_string(a.w) + " -> O" +
                    std::to_string(a.o) + " " + std::to_string(a.kernel_h) + "x" +
                    std::to_string(a.kernel_w) + " s" + std::to_string(a.stride_h);
  if (a.stride_w != a.stride_h) out += "x" + std::to_string(a.stride_w);
  out += " p" + std::to_string(a.pad_h);
  if (a.pad_w != a.pad_h) out += "x" + std::to_string(a.pad_w);
  if (a.dilation_h != 1 || a.dilation_w != 1)
    out += " d" + std::to_string(a.dilation_h) + "x" + std::to_string(a.dilation_w);
  return out;
}

void clear_conv_tune_cache() {
  Tuner& t = tuner();
  std::lock_guard tuning(t.tune_mutex);
  std::lock_guard lock(t.cache_mutex);
  t.picks.clear();
  t.order.clear();
}

void set_conv_tune_timer(ConvTuneTimer timer) {
  Tuner& t = tuner();
  std::lock_guard tuning(t.tune_mutex);
  t.timer = std::move(timer);
}

}  // namespace echelon::cuda
