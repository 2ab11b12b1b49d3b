// The fast CPU path's convolution kernels on ResNet-20's 3x3 layers (batch 128, 1 thread): thread
// CPU milliseconds per call (median of --repeats; CPU time, so other load on the machine hardly
// moves it) of the direct kernel (conv_direct.h) and Winograd (conv_winograd.h: F(2x2, 3x3), or
// F(4x4, 3x3) where the default setting takes it: all three layers with AVX-512), per
// direction, with the ratio direct / Winograd (> 1: Winograd faster) and Winograd's largest error
// against the direct result relative to max |direct|.
//
//   build/bench/exp_conv_cpu [--repeats N] [--batch N]
//                            [--stride2-backward-data | --winograd-tiles | --winograd-isa]
//
// --stride2-backward-data instead times conv2d_backward_input (conv.h's dispatch: im2col + GEMM +
// col2im) on ResNet-20's two stride-2 3x3 layers, the only float32 3x3 layers that take that path.
// --winograd-tiles instead compares Winograd F(2x2, 3x3) with F(4x4, 3x3) (AVX-512,
// conv_winograd43.h) on the forward and backward data of the three layers, the two alternating
// call by call (median of --repeats each), with F(4x4)'s largest error relative to max |F(2x2)|.
// --winograd-isa instead times Winograd with the AVX2 register tiles against the AVX-512 ones
// (F(2x2) both; and the default, F(4x4) where it fits), per direction, alternating call by call.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd.h>
#include <echelon/tensor/cpu/fast/parallel.h>

#include "bench/cpu_timing.h"
#include "bench/driver_args.h"

namespace {

using namespace echelon;
using bench::median_ms;
using bench::random_values;

double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// ResNet-20's stage 1 -> 2 and 2 -> 3 convolutions (3x3, padding 1, stride 2).
int time_stride2_backward_data(int repeats, int64_t batch) {
  std::printf("| layer (C -> O, HxW -> OHxOW) | backward data ms |\n|---|---|\n");
  for (const int64_t c : {16, 32}) {
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 3;
    window.pad_h = window.pad_w = 1;
    window.stride_h = window.stride_w = 2;
    const int64_t size = 512 / c;
    const Conv2dGeometry a = window.for_input(batch, c, size, size, 2 * c);
    const auto gy = random_values(size_t(a.n * a.o * a.out_h * a.out_w), 3),
               w = random_values(size_t(a.o * a.c * 9), 2);
    std::vector<float> gx(size_t(a.n * a.c * a.h * a.w));
    const double ms = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
    });
    std::printf("| %lld -> %lld, %lldx%lld -> %lldx%lld | %.2f |\n", static_cast<long long>(c),
                static_cast<long long>(a.o), static_cast<long long>(size),
                static_cast<long long>(size), static_cast<long long>(a.out_h),
                static_cast<long long>(a.out_w), ms);
  }
  return 0;
}

// Winograd F(2x2) vs F(4x4) on ResNet-20's stride-1 layers, alternating call by call.
int time_winograd_tiles(int repeats, int64_t batch) {
  if (!cpu::fast::conv_winograd_avx512_available()) {
    std::printf("this CPU lacks AVX-512: no F(4x4, 3x3) to compare\n");
    return 0;
  }
  cpu::fast::set_conv_winograd_isa(cpu::fast::WinogradIsa::Avx512);
  std::printf(
      "| layer (C -> O, HxW) | direction | F(2x2) ms | F(4x4) ms | F(2x2) / F(4x4) | rel. error "
      "|\n|---|---|---|---|---|---|\n");
  for (const int64_t c : {16, 32, 64}) {
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 3;
    window.pad_h = window.pad_w = 1;
    const Conv2dGeometry a = window.for_input(batch, c, 512 / c, 512 / c, c);
    const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
    const auto x = random_values(in, 1), w = random_values(size_t(a.o * a.c * 9), 2),
               gy = random_values(out, 3);
    for (const bool backward : {false, true}) {
      std::vector<float> got[2] = {std::vector<float>(backward ? in : out),
                                   std::vector<float>(backward ? in : out)};
      std::vector<double> ms[2];
      for (int call = 0; call < 2 * (repeats + 1); ++call) {
        const int f43 = call % 2;
        cpu::fast::set_conv_winograd_tile(f43 ? cpu::fast::WinogradTile::F4x4
                                              : cpu::fast::WinogradTile::F2x2);
        const double start = bench::thread_cpu_ms();
        if (backward)
          cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), got[f43].data());
        else
          cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, got[f43].data());
        if (call >= 2) ms[f43].push_back(bench::thread_cpu_ms() - start);  // the first: warm-up
      }
      for (auto& m : ms) std::sort(m.begin(), m.end());
      const double f22 = ms[0][ms[0].size() / 2], f44 = ms[1][ms[1].size() / 2];
      std::printf("| %lld -> %lld, %lldx%lld | %s | %.2f | %.2f | %.2f | %.1e |\n",
                  static_cast<long long>(c), static_cast<long long>(c), static_cast<long long>(a.h),
                  static_cast<long long>(a.w), backward ? "backward data" : "forward", f22, f44,
                  f22 / f44, relative_error(got[1], got[0]));
    }
  }
  cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F4x4);
  return 0;
}

// The Winograd kernels with the AVX2 register tiles against the AVX-512 ones (F(2x2, 3x3) both
// ways, the weight gradient always F(2x2); "AVX-512 F(4x4)": the default, F(4x4) where it fits),
// alternating call by call: on a CPU that runs 512-bit ops as two 256-bit halves (AMD Zen 4)
// the wider tiles need not win.
int time_winograd_isa(int repeats, int64_t batch) {
  if (!cpu::fast::conv_winograd_avx512_available()) {
    std::printf("this CPU lacks AVX-512: nothing to compare\n");
    return 0;
  }
  using cpu::fast::WinogradIsa;
  using cpu::fast::WinogradTile;
  struct Setting {
    WinogradIsa isa;
    WinogradTile tile;
  };
  const Setting settings[3] = {{WinogradIsa::Avx2, WinogradTile::F2x2},
                               {WinogradIsa::Avx512, WinogradTile::F2x2},
                               {WinogradIsa::Avx512, WinogradTile::F4x4}};
  std::printf(
      "| layer (C -> O, HxW) | direction | AVX2 ms | AVX-512 ms | AVX-512 F(4x4) ms | AVX2 / "
      "AVX-512 |\n|---|---|---|---|---|---|\n");
  for (const int64_t c : {16, 32, 64}) {
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 3;
    window.pad_h = window.pad_w = 1;
    const Conv2dGeometry a = window.for_input(batch, c, 512 / c, 512 / c, c);
    const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
    const auto x = random_values(in, 1), w = random_values(size_t(a.o * a.c * 9), 2),
               gy = random_values(out, 3);
    std::vector<float> y(out), gx(in), gw(size_t(a.o * a.c * 9));
    for (const char* direction : {"forward", "backward data", "backward weight"}) {
      std::vector<double> ms[3];
      for (int call = 0; call < 3 * (repeats + 1); ++call) {
        const int s = call % 3;
        cpu::fast::set_conv_winograd_isa(settings[s].isa);
        cpu::fast::set_conv_winograd_tile(settings[s].tile);
        const double start = bench::thread_cpu_ms();
        if (direction[0] == 'f')
          cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, y.data());
        else if (direction[9] == 'd')
          cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), gx.data());
        else
          cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw.data());
        if (call >= 3) ms[s].push_back(bench::thread_cpu_ms() - start);  // the first: warm-up
      }
      double median[3];
      for (int s = 0; s < 3; ++s) {
        std::sort(ms[s].begin(), ms[s].end());
        median[s] = ms[s][ms[s].size() / 2];
      }
      std::printf("| %lld -> %lld, %lldx%lld | %s | %.2f | %.2f | %.2f | %.2f |\n",
                  static_cast<long long>(c), static_cast<long long>(c), static_cast<long long>(a.h),
                  static_cast<long long>(a.w), direction, median[0], median[1], median[2],
                  median[0] / median[1]);
    }
  }
  cpu::fast::set_conv_winograd_isa(WinogradIsa::Avx512);
  cpu::fast::set_conv_winograd_tile(WinogradTile::F4x4);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  int64_t batch = 128;
  CLI::App app{"Direct vs Winograd convolution on ResNet-20's 3x3 layers, thread CPU ms",
               "exp_conv_cpu"};
  app.add_option("--repeats", repeats, "Timed calls per cell (the median is kept)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--batch", batch, "Images per call")->check(CLI::Range(1, 4096));
  bool stride2_backward_data = false;
  app.add_flag("--stride2-backward-data", stride2_backward_data,
               "Time the backward data of the stride-2 layers instead");
  bool winograd_tiles = false;
  app.add_flag("--winograd-tiles", winograd_tiles,
               "Compare Winograd F(2x2, 3x3) with F(4x4, 3x3) instead");
  bool winograd_isa = false;
  app.add_flag("--winograd-isa", winograd_isa,
               "Compare Winograd's AVX2 register tiles with the AVX-512 ones instead");
  echelon::bench::parse_args_or_exit(app, argc, argv);
  cpu::fast::set_num_threads(1);
  if (winograd_isa) return time_winograd_isa(repeats, batch);
  if (stride2_backward_data) return time_stride2_backward_data(repeats, batch);
  if (winograd_tiles) return time_winograd_tiles(repeats, batch);
  struct Layer {
    int64_t c, size, o;
  };
  std::printf(
      "| layer (C -> O, HxW) | direction | direct ms | Winograd ms | direct / Winograd | "
      "rel. error |\n|---|---|---|---|---|---|\n");
  for (const Layer& l : {Layer{16, 32, 16}, Layer{32, 16, 32}, Layer{64, 8, 64}}) {
    Conv2dGeometry window;
    window.kernel_h = window.kernel_w = 3;
    window.pad_h = window.pad_w = 1;
    const Conv2dGeometry a = window.for_input(batch, l.c, l.size, l.size, l.o);
    if (!cpu::fast::conv_winograd_usable(a) || !cpu::fast::conv_direct_usable(a)) {
      std::printf("this CPU lacks AVX2 + FMA: nothing to compare\n");
      return 0;
    }
    const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
    const auto x = random_values(in, 1), w = random_values(size_t(a.o * a.c * 9), 2),
               gy = random_values(out, 3);
    std::vector<float> y_d(out), y_w(out), gx_d(in), gx_w(in), gw_d(size_t(a.o * a.c * 9)),
        gw_w(gw_d.size());
    const double fd = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_direct_forward(a, x.data(), w.data(), nullptr, y_d.data());
    });
    const double fw = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, y_w.data());
    });
    const double bd = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_direct_backward_input(a, gy.data(), w.data(), gx_d.data());
    });
    const double bw = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), gx_w.data());
    });
    const double wd = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_direct_backward_weight(a, gy.data(), x.data(), gw_d.data());
    });
    const double ww = median_ms(repeats, /*warm=*/1, [&](int) {
      cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw_w.data());
    });
    std::printf("| %lld -> %lld, %lldx%lld | forward | %.2f | %.2f | %.2f | %.1e |\n",
                static_cast<long long>(l.c), static_cast<long long>(l.o),
                static_cast<long long>(l.size), static_cast<long long>(l.size), fd, fw, fd / fw,
                relative_error(y_w, y_d));
    std::printf("| | backward data | %.2f | %.2f | %.2f | %.1e |\n", bd, bw, bd / bw,
                relative_error(gx_w, gx_d));
    std::printf("| | backward weight | %.2f | %.2f | %.2f | %.1e |\n", wd, ww, wd / ww,
                relative_error(gw_w, gw_d));
  }
  return 0;
}
