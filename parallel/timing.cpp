#include <echelon/parallel/timing.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include <echelon/base/error.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

namespace {

// The q-quantile (0 <= q <= 1) of sorted `v`, interpolating between neighbours.
double quantile(const std::vector<double>& v, double q) {
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double ms(double seconds) {
  return seconds * 1e3;
}

}  // namespace

json::Value TimingStats::to_json() const {
  return json::Value::object()
      .set("repeats", repeats)
      .set("median_ms", ms(median_s))
      .set("iqr_ms", ms(iqr_s()))
      .set("q1_ms", ms(q1_s))
      .set("q3_ms", ms(q3_s))
      .set("min_ms", ms(min_s))
      .set("max_ms", ms(max_s))
      .set("mean_ms", ms(mean_s));
}

TimingStats summarize(std::vector<double> seconds) {
  TimingStats s;
  s.repeats = static_cast<int>(seconds.size());
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  s.median_s = quantile(seconds, 0.5);
  s.q1_s = quantile(seconds, 0.25);
  s.q3_s = quantile(seconds, 0.75);
  s.min_s = seconds.front();
  s.max_s = seconds.back();
  s.mean_s =
      std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  return s;
}

void synchronize(Device device) {
  if (!device.is_cuda()) return;
#if ECHELON_WITH_CUDA
  cuda::DeviceGuard guard(device.index);
  ECH_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(device.index)));
#else
  ECH_FAIL("synchronize: ", device, " requested but Echelon was built without CUDA");
#endif
}

double time_once(const std::function<void()>& fn, Device device) {
  using Clock = std::chrono::steady_clock;
  synchronize(device);
  const auto start = Clock::now();
  fn();
  synchronize(device);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

namespace {

// One timed round: CUDA events around `fn` on the current stream, or the host clock on CPU.
double time_round(const std::function<void()>& fn, Device device) {
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    cuda::DeviceGuard guard(device.index);
    const cudaStream_t stream = cuda::current_stream(device.index);
    cuda::Event start(true), end(true);
    start.record(stream);
    fn();
    end.record(stream);
    end.synchronize();
    return start.elapsed_ms(end) / 1e3;
  }
#endif
  return time_once(fn, device);
}

}  // namespace

TimingStats time_repeated(const std::function<void()>& fn, Device device, int warmup, int repeats) {
  ECH_CHECK(warmup >= 0, "time_repeated: warmup must be >= 0 (got ", warmup, ")");
  ECH_CHECK(repeats >= 1, "time_repeated: repeats must be >= 1 (got ", repeats, ")");
  for (int i = 0; i < warmup; ++i) fn();
  synchronize(device);
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(repeats));
  for (int i = 0; i < repeats; ++i) seconds.push_back(time_round(fn, device));
  return summarize(std::move(seconds));
}

}  // namespace echelon::parallel
