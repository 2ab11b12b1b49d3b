// conv2d_relu's backward on the fast CPU path (1 thread): the ReLU's mask and the bias gradient
// in one pass (cpu::fast::conv2d_relu_backward_bias) against the two kernels the composition
// runs (cpu::fast::unary_backward(Relu), then cpu::fast::conv2d_backward_bias). Thread CPU
// milliseconds per call, median of --repeats; the two are timed in alternation for --rounds
// rounds and each round's ratio composed / fused is printed, then the median and range of the
// ratios. Each call takes the next of --sets copies of its tensors (beyond the L2 cache, as in a
// training step). Shapes: AlexNet's and VGG-16's ReLU'd convolution outputs at CIFAR size.
// --table bias: the unfused bias gradient instead, cpu::fast::conv2d_backward_bias (planes in
// memory order, since gpu22) against its previous loop (channel by channel, kept below as the
// baseline, compiled with the same -fopenmp-simd); both must give the same bits (checked).
//
//   build/bench/exp_conv_relu_cpu [--repeats N] [--rounds N] [--batch N] [--sets N]
//                                 [--table fused|bias]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <echelon/kernels/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/elementwise.h>
#include <echelon/tensor/cpu/fast/parallel.h>

#include "bench/cpu_timing.h"
#include "bench/driver_args.h"

namespace {

// The bias gradient's loop before gpu22: channel by channel, each channel's N planes (O planes
// apart) summed in float, the plane sums added in double in image order.
float plane_sum(const float* plane, int64_t positions) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t q = 0; q < positions; ++q) sum += plane[q];
  return sum;
}
void bias_by_channel(const echelon::Conv2dGeometry& a, const float* grad_out, float* grad_bias) {
  const int64_t positions = a.out_h * a.out_w;
  for (int64_t k = 0; k < a.o; ++k) {
    double acc = 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      acc += static_cast<double>(plane_sum(grad_out + (n * a.o + k) * positions, positions));
    grad_bias[k] = static_cast<float>(acc);
  }
}

}  // namespace

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
  std::string table = "fused";
  app.add_option("--table", table,
                 "fused: mask + bias gradient fused vs composed; bias: the bias gradient in "
                 "memory order vs channel by channel")
      ->check(CLI::IsMember({"fused", "bias"}));
  echelon::bench::parse_args_or_exit(app, argc, argv);
  cpu::fast::set_num_threads(1);
  const bool bias_table = table == "bias";
  if (bias_table)
    std::printf(
        "| activation (N, O, HxW) | memory order ms | by channel ms | by channel / memory order, "
        "median [min, max] of rounds |\n|---|---|---|---|\n");
  else
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
    std::vector<float> grad_bias(size_t(s.o)), baseline_bias(size_t(s.o));
    // "fused" and "composed" name the table's two columns (for --table bias: memory order, the
    // library's loop, and channel by channel, the baseline).
    const auto fused = [&](int i) {
      const size_t k = size_t(i % sets);
      if (bias_table)
        cpu::fast::conv2d_backward_bias(a, g[k].data(), grad_bias.data());
      else
        cpu::fast::conv2d_relu_backward_bias(a, g[k].data(), y[k].data(), masked[k].data(),
                                             grad_bias.data());
    };
    const auto composed = [&](int i) {
      const size_t k = size_t(i % sets);
      if (bias_table) {
        bias_by_channel(a, g[k].data(), baseline_bias.data());
        return;
      }
      cpu::fast::unary_backward(UnaryOp::Relu, g[k].data(), y[k].data(), y[k].data(),
                                masked[k].data(), int64_t(count));
      cpu::fast::conv2d_backward_bias(a, masked[k].data(), grad_bias.data());
    };
    if (bias_table) {  // the reordering must not change a bit
      fused(0), composed(0);
      if (std::memcmp(grad_bias.data(), baseline_bias.data(), grad_bias.size() * sizeof(float))) {
        std::fprintf(stderr, "exp_conv_relu_cpu: the two bias gradients differ\n");
        return 1;
      }
    }
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
