// The direct convolution kernels (tensor/cpu/fast/conv_direct.h) in both instruction sets,
// against the naive twins: odd channel counts (C = 1, 3, 6, 7; O = 6, 16, 17), 3x3 and 5x5
// windows, padding 0..2, stride 1 and 2 (the AVX-512 kernels where the CPU has them, but for the
// backward data at stride 2, which takes im2col), batch 1 and 5, 1 and 2 threads; an Inf in the
// input reaching only the weights that read it; LeNet-5's two layers; and the ISA setting's
// contract.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/matmul.h>

#include "tests/support/setting_scope.h"

namespace echelon {
namespace {

using cpu::fast::DirectIsa;

// Sets the direct kernels' ISA and the pool's thread count for a scope; restores both after.
struct DirectScope {
  DirectScope(DirectIsa isa, int threads)
      : isa_(cpu::fast::conv_direct_isa, cpu::fast::set_conv_direct_isa, isa),
        threads_(cpu::fast::num_threads, cpu::fast::set_num_threads, threads) {}
  test::SettingScope<DirectIsa> isa_;
  test::SettingScope<int> threads_;
};

// The ISAs this CPU runs: AVX2 always (the kernels need it: conv_direct_usable), AVX-512 where
// present.
std::vector<DirectIsa> isas() {
  std::vector<DirectIsa> out = {DirectIsa::Avx2};
  if (cpu::fast::conv_direct_avx512_available()) out.push_back(DirectIsa::Avx512);
  return out;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Largest |a - b| / (1e-4 + 1e-4 |b|) (a NaN counts as a miss): <= 1 means within tolerance.
double violation(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - double(b[i]));
    worst = std::max(worst, std::isnan(d) ? 1e30 : d / (1e-4 + 1e-4 * std::abs(double(b[i]))));
  }
  return worst;
}

Conv2dGeometry geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t k,
                        int64_t stride, int64_t pad) {
  Conv2dGeometry g;
  g.kernel_h = g.kernel_w = k;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  return g.for_input(n, c, h, w, o);
}

// The three directions of the fast path (which takes the direct kernels for these geometries)
// against the naive twins; outputs start as NaN, so an element left unwritten fails.
void check_direct(const Conv2dGeometry& a) {
  REQUIRE(cpu::fast::conv_direct_usable(a));
  const auto in = size_t(a.n * a.c * a.h * a.w), wn = size_t(a.o * a.c * a.kernel_h * a.kernel_w),
             out = size_t(a.n * a.o * a.out_h * a.out_w);
  const auto x = random_floats(in, 11), w = random_floats(wn, 12), b = random_floats(a.o, 13),
             gy = random_floats(out, 14);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> y(out), y_fast(out, nan), gx(in), gx_fast(in, nan), gw(wn), gw_fast(wn, nan);
  cpu::conv2d_forward(a, x.data(), w.data(), b.data(), y.data());
  cpu::fast::conv2d_forward(a, x.data(), w.data(), b.data(), y_fast.data());
  CHECK_MESSAGE(violation(y_fast, y) <= 1.0, "forward");
  cpu::conv2d_backward_input(a, gy.data(), w.data(), gx.data());
  cpu::fast::conv2d_backward_input(a, gy.data(), w.data(), gx_fast.data());
  CHECK_MESSAGE(violation(gx_fast, gx) <= 1.0, "backward input");
  cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
  cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), gw_fast.data());
  CHECK_MESSAGE(violation(gw_fast, gw) <= 1.0, "backward weight");
}

}  // namespace

TEST_SUITE("fast_cpu") {
  TEST_CASE("direct conv kernels, AVX2 and AVX-512: odd channels, 3x3 / 5x5, padding, stride") {
    if (!cpu::blas_available() || !cpu::fast::conv_direct_usable(geometry(1, 1, 8, 8, 1, 3, 1, 1)))
      return;         // no fast path, or a CPU without AVX2: the direct kernels never run
    int variant = 0;  // walks batch, threads and image size through the cases
    for (const DirectIsa isa : isas())
      for (const int64_t c : {1, 3, 6, 7})
        for (const int64_t o : {6, 16, 17})
          for (const int64_t k : {3, 5})
            for (const int64_t pad : {0, 1, 2})
              for (const int64_t stride : {1, 2}) {
                ++variant;
                const int64_t n = variant % 2 == 0 ? 5 : 1;
                const int threads = variant % 4 < 2 ? 1 : 2;
                // 11 x 13 images, every third case 7 x 9 (a 3x5 output at 5x5 / padding 0)
                const int64_t h = variant % 3 == 0 ? 7 : 11, w = variant % 3 == 0 ? 9 : 13;
                CAPTURE(isa == DirectIsa::Avx512);
                CAPTURE(c);
                CAPTURE(o);
                CAPTURE(k);
                CAPTURE(pad);
                CAPTURE(stride);
                CAPTURE(n);
                CAPTURE(threads);
                CAPTURE(h);
                DirectScope scope(isa, threads);
                check_direct(geometry(n, c, h, w, o, k, stride, pad));
              }
  }

  TEST_CASE("direct conv kernels, AVX2 and AVX-512: LeNet-5's and ResNet's layers, wide images") {
    if (!cpu::blas_available() || !cpu::fast::conv_direct_usable(geometry(1, 1, 8, 8, 1, 3, 1, 1)))
      return;
    for (const DirectIsa isa : isas())
      for (const int threads : {1, 2}) {
        CAPTURE(isa == DirectIsa::Avx512);
        CAPTURE(threads);
        DirectScope scope(isa, threads);
        check_direct(geometry(9, 1, 28, 28, 6, 5, 1, 2));   // layer 1: 784 positions, 49 vectors
        check_direct(geometry(7, 6, 14, 14, 16, 5, 1, 0));  // layer 2 on 14x14 inputs
        check_direct(geometry(5, 6, 12, 12, 16, 5, 1, 0));  // layer 2 as LeNet-5 runs it (8x8)
        check_direct(geometry(2, 3, 5, 37, 4, 3, 1, 1));    // 37 columns: 3 vectors per row
        check_direct(geometry(2, 2, 40, 3, 5, 3, 1, 2));    // narrow and tall, padding 2
        // Stride 2: ResNet's two downsampling layers (32 / 64 channels: the channels-in-lanes
        // weight gradient), 35 output columns from 70 or 71 input ones (3 vectors per row, the
        // last column's window past the image edge or not), a 5x5 window with padding 2.
        check_direct(geometry(3, 16, 32, 32, 32, 3, 2, 1));
        check_direct(geometry(2, 32, 16, 16, 64, 3, 2, 1));
        check_direct(geometry(2, 3, 9, 70, 5, 3, 2, 1));
        check_direct(geometry(2, 3, 10, 71, 17, 3, 2, 1));
        check_direct(geometry(2, 2, 41, 6, 16, 5, 2, 2));
      }
  }

  TEST_CASE("direct conv weight gradient, both ISAs: an Inf reaches only the weights reading it") {
    if (!cpu::blas_available() || !cpu::fast::conv_direct_usable(geometry(1, 1, 8, 8, 1, 3, 1, 1)))
      return;
    for (const DirectIsa isa : isas())
      for (const int64_t k : {3, 5}) {
        CAPTURE(isa == DirectIsa::Avx512);
        CAPTURE(k);
        DirectScope scope(isa, 1);
        // 13 columns: vectors past the plane's end lie over padding and the next row
        const Conv2dGeometry a = geometry(1, 2, 6, 13, 3, k, 1, 1);
        auto x = random_floats(size_t(2 * 6 * 13), 21);
        x[size_t((1 * 6 + 3) * 13 + 12)] = std::numeric_limits<float>::infinity();
        const auto gy = random_floats(size_t(3 * a.out_h * a.out_w), 22);
        std::vector<float> gw(size_t(k * k * 6)), gw_fast(gw.size());
        cpu::conv2d_backward_weight(a, gy.data(), x.data(), gw.data());
        cpu::fast::conv2d_backward_weight(a, gy.data(), x.data(), gw_fast.data());
        int finite = 0;
        for (size_t i = 0; i < gw.size(); ++i) {
          CAPTURE(i);
          if (std::isfinite(gw[i])) {
            ++finite;
            CHECK(std::abs(gw_fast[i] - gw[i]) <= 1e-4 + 1e-4 * std::abs(gw[i]));
          } else {
            CHECK_FALSE(std::isfinite(gw_fast[i]));
          }
        }
        CHECK(finite >= int(gw.size()) / 2);  // channel 0's weights never read the Inf
        CHECK(finite < int(gw.size()));
      }
  }

  TEST_CASE("direct conv ISA setting: AVX-512 by default where the CPU has it, refused elsewhere") {
    const DirectIsa before = cpu::fast::conv_direct_isa();
    CHECK((before == DirectIsa::Avx512) == cpu::fast::conv_direct_avx512_available());
    if (cpu::fast::conv_direct_avx512_available()) {
      cpu::fast::set_conv_direct_isa(DirectIsa::Avx2);
      CHECK(cpu::fast::conv_direct_isa() == DirectIsa::Avx2);
    } else {
      CHECK_THROWS(cpu::fast::set_conv_direct_isa(DirectIsa::Avx512));
      CHECK(cpu::fast::conv_direct_isa() == DirectIsa::Avx2);
    }
    cpu::fast::set_conv_direct_isa(before);
  }
}

}  // namespace echelon
