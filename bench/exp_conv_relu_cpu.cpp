// conv2d_relu's backward on the fast CPU path (1 thread): the ReLU's mask and the bias gradient
// in one pass (cpu::fast::conv2d_relu_backward_bias) against the two kernels the composition
// runs (cpu::fast::unary_backward(Relu), then cpu::fast::conv2d_backward_bias). Thread CPU
// milliseconds per call, median of --repeats; the two are timed in alternation for --rounds
// rounds and each round's ratio composed / fused is printed, then the median and range of the
// ratios. Each call takes the next of --sets copies of its tensors (beyond the L2 cache, as in a
// training step). Shapes: AlexNet's and VGG-16's ReLU'd convolution outputs at CIFAR size.
//
//   build/bench/exp_conv_relu_cpu [--repeats N] [--rounds N] [--batch N] [--sets N]
#include <algorithm>
#include <cstdio>
#include <vector>

#include <echelon/kernels/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/elementwise.h>
#include <echelon/tensor/cpu/fast/parallel.h>

#include "bench/cpu_timing.h"
#include "bench/driver_args.h"

int main(int argc, char** argv) {
  using namespace echelon;
  using bench::median_ms;
  using bench::random_values;
  int repeats = 21, rounds = 5, sets = 4;
  int64_t batch = 32;
  CLI::App app{"conv2d_relu's backward: mask + bias gradient fused vs composed, thread CPU ms",
               "exp_conv_relu_cpu"};
  app.add_option("--repeats", repeats, "Timed calls per cell (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--rounds", rounds, "Alternating fused/composed rounds")
      ->check(CLI::Range(1, 100));
  app.add_option("--batch", batch, "Images per call")->check(CLI::Range(1, 4096));
  app.add_option("--sets", sets, "Copies of the tensors, taken in turn")->check(CLI::Range(1, 64));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  cpu::fast::set_num_threads(1);
  std::printf(
      "| activation (N, O, HxW) | fused ms | composed ms | composed / fused, median "
      "[min, max] of rounds |\n|---|---|---|---|\n");
  struct Activation {
    int64_t o, size;
  };
  for (const Activation& s :
       {Activation{64, 32}, Activation{128, 16}, Activation{256, 8}, Activation{384, 13}}) {
    Conv2dGeometry a;  // only n, o, out_h, out_w matter to these kernels
    a.n = batch, a.o = s.o, a.out_h = a.out_w = s.size;
    const auto count = size_t(batch * s.o * s.size * s.size);
    std::vector<std::vector<float>> g, y, masked;
    for (int i = 0; i < sets; ++i) {
      g.push_back(random_values(count, uint32_t(2 * i + 1)));
      y.push_back(random_values(count, uint32_t(2 * i + 2)));
      for (float& v : y.back()) v = std::max(v, 0.0f);  // a ReLU's output: half zeros
      masked.emplace_back(count);
    }
    std::vector<float> grad_bias(size_t(s.o));
    const auto fused = [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::conv2d_relu_backward_bias(a, g[k].data(), y[k].data(), masked[k].data(),
                                           grad_bias.data());
    };
    const auto composed = [&](int i) {
      const size_t k = size_t(i % sets);
      cpu::fast::unary_backward(UnaryOp::Relu, g[k].data(), y[k].data(), y[k].data(),
                                masked[k].data(), int64_t(count));
      cpu::fast::conv2d_backward_bias(a, masked[k].data(), grad_bias.data());
    };
    std::vector<double> fused_ms, composed_ms, ratios;
    for (int r = 0; r < rounds; ++r) {
      fused_ms.push_back(median_ms(repeats, sets, fused));
      composed_ms.push_back(median_ms(repeats, sets, composed));
      ratios.push_back(composed_ms.back() / fused_ms.back());
    }
    const auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    std::printf("| %lld, %lld, %lldx%lld | %.3f | %.3f | %.2f [%.2f, %.2f] |\n",
                static_cast<long long>(batch), static_cast<long long>(s.o),
                static_cast<long long>(s.size), static_cast<long long>(s.size), median(fused_ms),
                median(composed_ms), median(ratios),
                *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()));
  }
  return 0;
}
