// The fast CPU batch norm on ResNet-20's shapes (batch 128, 1 thread): thread CPU milliseconds
// per call (median of --repeats) of the fused BN + residual + ReLU forward and its backward (the
// masked gradient stored, as a BasicBlock's end), and of BN + ReLU (its backward reading y, or
// recomputing the mask from x). Each call takes the next of --sets copies of its tensors, so
// (sets x tensors) exceed the L3 cache and the data comes from memory, as in a training step where
// an activation is read long after it was written.
//
// --portable runs the portable loops where the CPU would take their AVX-512 twins.
//
//   build/bench/exp_norm_cpu [--repeats N] [--batch N] [--sets N] [--portable]
#include <algorithm>
#include <cstdio>
#include <vector>

#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/parallel.h>

#include "bench/cpu_timing.h"
#include "bench/driver_args.h"

namespace {

using namespace echelon;
using bench::median_ms;
using bench::random_values;

}  // namespace

int main(int argc, char** argv) {
  int repeats = 21, sets = 8;
  bool portable = false;
  int64_t batch = 128;
  CLI::App app{"Fast CPU batch norm (+ residual + ReLU) on ResNet-20's shapes, thread CPU ms",
               "exp_norm_cpu"};
  app.add_option("--repeats", repeats, "Timed calls per cell (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch", batch, "Images per call")->check(CLI::Range(1, 4096));
  app.add_option("--sets", sets, "Copies of the tensors, taken in turn")->check(CLI::Range(1, 64));
  app.add_flag("--portable", portable, "The portable per-plane loops, not their AVX-512 twins");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  if (portable) cpu::fast::set_batch_norm_avx512(false);
  std::printf("batch norm loops: %s\n", cpu::fast::batch_norm_avx512() ? "AVX-512" : "portable");
  cpu::fast::set_num_threads(1);
  std::printf(
      "| shape (N, C, HxW) | BN+add+ReLU fwd ms | its backward ms | BN+ReLU fwd ms | its backward "
      "ms | its backward, mask from x ms |\n|---|---|---|---|---|---|\n");
  struct Shape {
    int64_t c, size;
  };
  for (const Shape& s : {Shape{16, 32}, Shape{32, 16}, Shape{64, 8}}) {
    const NormArgs a{batch, s.c, s.size * s.size};
    const auto count = size_t(a.n * a.c * a.spatial);
    // Per set: x, residual, y, grad_out, grad_in, masked.
    std::vector<std::vector<float>> x, res, y, gy, gx, masked, affine;
    for (int i = 0; i < sets; ++i) {
      x.push_back(random_values(count, uint32_t(6 * i + 1)));
      res.push_back(random_values(count, uint32_t(6 * i + 2)));
      gy.push_back(random_values(count, uint32_t(6 * i + 3)));
      y.emplace_back(count);
      gx.emplace_back(count);
      masked.emplace_back(count);
      affine.emplace_back(size_t(2 * a.c));
    }
    const auto channels = size_t(a.c);
    std::vector<float> gamma(channels, 1.0f), beta(channels, 0.1f), rm(channels), rv(channels),
        mean(channels), invstd(channels), g_gamma(channels), g_beta(channels);
    auto forward = [&](int call, bool residual) {
      const size_t k = size_t(call % sets);
      cpu::fast::batch_norm_relu_train_forward(a, x[k].data(), gamma.data(), beta.data(), rm.data(),
                                               rv.data(), 0.1, 1e-5, y[k].data(), mean.data(),
                                               invstd.data(), residual ? res[k].data() : nullptr,
                                               residual ? nullptr : affine[k].data());
    };
    // store: the masked gradient stored (a block's end); from_x: the mask recomputed from x.
    auto backward = [&](int call, bool store, bool from_x) {
      const size_t k = size_t(call % sets);
      cpu::fast::batch_norm_relu_backward(a, gy[k].data(), y[k].data(), x[k].data(), gamma.data(),
                                          mean.data(), invstd.data(), gx[k].data(), g_gamma.data(),
                                          g_beta.data(), store ? masked[k].data() : nullptr,
                                          from_x ? affine[k].data() : nullptr);
    };
    const double fa = median_ms(repeats, sets, [&](int i) { forward(i, true); });
    const double ba = median_ms(repeats, sets, [&](int i) { backward(i, true, false); });
    const double fr = median_ms(repeats, sets, [&](int i) { forward(i, false); });
    const double br = median_ms(repeats, sets, [&](int i) { backward(i, false, false); });
    const double bx = median_ms(repeats, sets, [&](int i) { backward(i, false, true); });
    std::printf("| %lld, %lld, %lldx%lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                static_cast<long long>(a.n), static_cast<long long>(a.c),
                static_cast<long long>(s.size), static_cast<long long>(s.size), fa, ba, fr, br, bx);
  }
  return 0;
}
