// LeNet-5's non-convolution kernels on the fast CPU path (batch 64, 1 thread): thread CPU
// milliseconds per call (median of --repeats) of the ReLU forward and backward and the 2x2 max
// pooling forward and backward on the two conv outputs, and the bias gradients of the Linear
// layers (ops::sum over the batch dim). Each call takes the next of --sets copies of its tensors,
// so the data comes from beyond the L2 cache, as in a training step.
//
// The driver uses only entry points older than the kernels it times, so the same source built
// against an older library times the older kernels (bench/RESULTS.md).
//
//   build/bench/exp_pool_relu_cpu [--repeats N] [--batch N] [--sets N]
#include <cstdio>
#include <vector>

#include <echelon/tensor/cpu/fast/elementwise.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/ops.h>

#include "bench/cpu_timing.h"
#include "bench/driver_args.h"

int main(int argc, char** argv) {
  using namespace echelon;
  using bench::median_ms;
  using bench::random_values;
  int repeats = 41, sets = 8;
  int64_t batch = 64;
  CLI::App app{"LeNet-5's ReLU, 2x2 max pooling and Linear bias gradients, thread CPU ms",
               "exp_pool_relu_cpu"};
  app.add_option("--repeats", repeats, "Timed calls per cell (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch", batch, "Images per call")->check(CLI::Range(1, 4096));
  app.add_option("--sets", sets, "Copies of the tensors, taken in turn")->check(CLI::Range(1, 64));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  cpu::fast::set_num_threads(1);
  ops::set_cpu_kernels(ops::CpuKernels::Fast);
  std::printf(
      "| activation (N, C, HxW) | ReLU fwd ms | ReLU bwd ms | max pool fwd ms | max pool bwd ms "
      "|\n|---|---|---|---|---|\n");
  struct Activation {
    int64_t c, size;
  };
  for (const Activation& s : {Activation{6, 24}, Activation{16, 8}}) {
    const Pool2dGeometry a = Pool2dGeometry{}.for_input(batch, s.c, s.size, s.size);
    const auto count = size_t(batch * s.c * s.size * s.size);
    const auto pooled = size_t(batch * s.c * a.out_h * a.out_w);
    // Per set: the conv output x, its ReLU y, their gradients, the pooled output, argmax and
    // gradient.
    std::vector<std::vector<float>> x, y, gy, gx, py, pg;
    std::vector<std::vector<int64_t>> arg;
    for (int i = 0; i < sets; ++i) {
      x.push_back(random_values(count, uint32_t(3 * i + 1)));
      gy.push_back(random_values(count, uint32_t(3 * i + 2)));
      pg.push_back(random_values(pooled, uint32_t(3 * i + 3)));
      y.emplace_back(count);
      gx.emplace_back(count);
      py.emplace_back(pooled);
      arg.emplace_back(pooled);
    }
    const auto n = int64_t(count);
    const double relu_f = median_ms(repeats, sets, [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::unary(UnaryOp::Relu, x[k].data(), y[k].data(), n);
    });
    const double relu_b = median_ms(repeats, sets, [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::unary_backward(UnaryOp::Relu, gy[k].data(), y[k].data(), y[k].data(), gx[k].data(),
                                n);
    });
    const double pool_f = median_ms(repeats, sets, [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::max_pool2d_forward(a, y[k].data(), py[k].data(), arg[k].data());
    });
    const double pool_b = median_ms(repeats, sets, [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::max_pool2d_backward(a, pg[k].data(), arg[k].data(), gx[k].data());
    });
    std::printf("| %lld, %lld, %lldx%lld | %.4f | %.4f | %.4f | %.4f |\n",
                static_cast<long long>(batch), static_cast<long long>(s.c),
                static_cast<long long>(s.size), static_cast<long long>(s.size), relu_f, relu_b,
                pool_f, pool_b);
  }
  std::printf("\n| Linear bias gradient: ops::sum(grad (N, out), {0}) | ms |\n|---|---|\n");
  Generator gen(5);
  for (const int64_t features : {120, 84, 10}) {
    std::vector<Tensor> grads;
    grads.reserve(size_t(sets));
    for (int i = 0; i < sets; ++i) grads.push_back(ops::randn({batch, features}, gen));
    const double ms =
        median_ms(repeats, sets, [&](int i) { (void)ops::sum(grads[size_t(i % sets)], {0}); });
    std::printf("| (%lld, %lld) | %.4f |\n", static_cast<long long>(batch),
                static_cast<long long>(features), ms);
  }
  return 0;
}
