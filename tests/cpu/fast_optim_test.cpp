// The fast SGD update (tensor/cpu/fast/optim.h) against the naive twin (tensor/cpu/optim.h) bit
// for bit: every variant (plain, momentum, dampening, Nesterov, weight decay; a first step and a
// later one), float and double, the AVX-512 and portable builds, lengths around the vector widths
// and across thread-pool chunks, 1 and 2 threads; the moving average (--ema); the guard and the
// device-side rate; NaN and Inf gradients; and ops::sgd_step_ taking it under CpuKernels::Fast.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <echelon/tensor/cpu/fast/optim.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/optim.h>
#include <echelon/tensor/ops.h>

#include "tests/support/setting_scope.h"

namespace echelon {
namespace {

// Thread count and the SGD ISA switch for a scope; restored after.
struct SgdScope {
  SgdScope(int threads, bool avx512)
      : threads_(cpu::fast::num_threads, cpu::fast::set_num_threads, threads),
        avx512_(cpu::fast::sgd_avx512, cpu::fast::set_sgd_avx512, avx512) {}
  test::SettingScope<int> threads_;
  test::SettingScope<bool> avx512_;
};

template <typename T>
std::vector<T> values(int64_t n, uint32_t seed, double scale) {
  std::vector<T> v(static_cast<size_t>(n));
  uint32_t state = seed;
  for (T& x : v) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<T>(scale * (static_cast<double>(state >> 8) / 8388608.0 - 1.0));
  }
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// One update by the twin and by the fast path from the same state; both results compared bit for
// bit (parameters, momentum buffers and, with o.ema_decay, moving averages).
template <typename T>
void check_update(int64_t n, const SGDOptions& o, bool first_step, const float* guard = nullptr,
                  const double* lr = nullptr, bool special_grads = false) {
  std::vector<T> grad = values<T>(n, 7, 3.0);
  if (special_grads && n >= 3) {
    grad[0] = std::numeric_limits<T>::quiet_NaN();
    grad[1] = std::numeric_limits<T>::infinity();
    grad[2] = -T(0);
  }
  std::vector<T> param_twin = values<T>(n, 11, 1.0), param_fast = param_twin;
  std::vector<T> buf_twin = values<T>(n, 13, 0.5), buf_fast = buf_twin;
  std::vector<T> ema_twin = values<T>(n, 17, 1.0), ema_fast = ema_twin;
  const std::vector<T> ema_before = ema_twin;
  const bool has_buffer = o.momentum != 0, has_ema = o.ema_decay > 0;
  cpu::sgd_step<T>(n, o, first_step, param_twin.data(), grad.data(),
                   has_buffer ? buf_twin.data() : nullptr, guard, lr,
                   has_ema ? ema_twin.data() : nullptr);
  cpu::fast::sgd_step<T>(n, o, first_step, param_fast.data(), grad.data(),
                         has_buffer ? buf_fast.data() : nullptr, guard, lr,
                         has_ema ? ema_fast.data() : nullptr);
  CHECK(same_bits(param_twin, param_fast));
  CHECK(same_bits(buf_twin, buf_fast));
  CHECK(same_bits(ema_twin, ema_fast));
  // Moved exactly when averaging and not stopped by the guard (the comparison alone would also
  // pass if both paths ignored the average).
  CHECK(same_bits(ema_twin, ema_before) == (!has_ema || (guard && !std::isfinite(*guard))));
}

std::vector<SGDOptions> all_variants() {
  std::vector<SGDOptions> out;
  out.push_back({0.1, 0.0, 0.0, 0.0, false});         // plain
  out.push_back({0.1, 0.0, 0.0, 5e-4, false});        // plain, weight decay
  out.push_back({0.05, 0.9, 0.0, 0.0, false});        // momentum
  out.push_back({0.05, 0.9, 0.1, 1e-4, false});       // momentum, dampening, weight decay
  out.push_back({0.05, 0.9, 0.0, 5e-4, true});        // Nesterov
  out.push_back({0.1, 0.0, 0.0, 0.0, false, 0.9});    // plain, moving average
  out.push_back({0.05, 0.9, 0.0, 5e-4, true, 0.99});  // Nesterov, moving average
  return out;
}

}  // namespace

TEST_SUITE("fast_optim") {
  TEST_CASE("SGD: fast path bit-identical to the twin, every variant, both ISAs and dtypes") {
    std::vector<bool> isas{false};
    if (cpu::fast::sgd_avx512_available()) isas.push_back(true);
    for (const bool avx512 : isas)
      for (const int threads : {1, 2}) {
        SgdScope scope(threads, avx512);
        for (const int64_t n : {1, 7, 8, 15, 16, 17, 63, 1000, 100003})
          for (const SGDOptions& o : all_variants())
            for (const bool first : {true, false}) {
              CAPTURE(avx512);
              CAPTURE(threads);
              CAPTURE(n);
              CAPTURE(o.momentum);
              CAPTURE(o.nesterov);
              CAPTURE(o.ema_decay);
              CAPTURE(first);
              check_update<float>(n, o, first);
              check_update<double>(n, o, first);
            }
      }
  }

  TEST_CASE("SGD: the guard skips the update, the device-side rate replaces o.lr, NaN/Inf kept") {
    const SGDOptions o{0.05, 0.9, 0.0, 5e-4, false, 0.9};
    const float inf_guard = std::numeric_limits<float>::infinity(), finite_guard = 2.0f;
    const double rate = 0.003;
    for (const bool first : {true, false}) {
      check_update<float>(100, o, first, &inf_guard);
      check_update<float>(100, o, first, &finite_guard, &rate);
      check_update<float>(100, o, first, nullptr, nullptr, /*special_grads=*/true);
    }
    // The guard really stops it (both paths agreeing on "nothing" would pass the checks above).
    std::vector<float> param{1.0f, 2.0f}, grad{1.0f, 1.0f}, buf{0.0f, 0.0f};
    cpu::fast::sgd_step<float>(2, o, false, param.data(), grad.data(), buf.data(), &inf_guard);
    CHECK(param == std::vector<float>{1.0f, 2.0f});
    cpu::fast::sgd_step<float>(2, o, false, param.data(), grad.data(), buf.data(), nullptr, &rate);
    CHECK(param[0] < 1.0f);
    CHECK(buf[0] == doctest::Approx(1.0 + 5e-4));
  }

  TEST_CASE("ops::sgd_step_ takes the fast path under CpuKernels::Fast, with the same result") {
    const ops::CpuKernels before = ops::cpu_kernels();
    const SGDOptions o{0.05, 0.9, 0.0, 5e-4, true};
    Generator gen(3);
    const Tensor grad = ops::randn({33, 17}, gen);
    const Tensor param0 = ops::randn({33, 17}, gen);
    std::vector<Tensor> params;
    for (const ops::CpuKernels kernels : {ops::CpuKernels::Naive, ops::CpuKernels::Fast}) {
      ops::set_cpu_kernels(kernels);
      Tensor param = param0.clone();
      Tensor buf = Tensor::zeros({33, 17});
      ops::sgd_step_(param, grad, buf, o, true);
      ops::sgd_step_(param, grad, buf, o, false);
      params.push_back(param);
    }
    ops::set_cpu_kernels(before);
    const auto bits = [](const Tensor& t) {
      return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
    };
    CHECK(same_bits(bits(params[0]), bits(params[1])));
    CHECK_FALSE(same_bits(bits(params[0]), bits(param0)));
  }
}

}  // namespace echelon
