// Winograd F(2x2, 3x3) (tensor/cpu/fast/conv_winograd.h) against the naive twin, forward,
// backward-data and backward-weight, on ResNet-20's layers and odd cases (quads that pair across
// tile rows, an odd number of quads, 1 to 7 output channels left over from the 6-channel register
// tiles, padding 0 and 2, several images per thread), at 1 and 3 threads, with the AVX2 and (where
// the CPU has it) the AVX-512 GEMM tiles; the direct kernel on the same shapes (the level below);
// the usable() rules; a non-contiguous input through ops::conv2d; and what a non-finite input does.
// F(4x4, 3x3) (conv_winograd43.h, AVX-512) has its own parity case (ResNet's shapes, odd channel
// counts, batch 1 and 5, padding 0/1/2, 1 and 2 threads, ReLU-like inputs) and usable() rules;
// the F(2x2) cases pin set_conv_winograd_tile(F2x2).
// The AVX-512 forward / backward-data transform reads the unpadded image (border lanes masked
// off) where AVX2 reads a padded copy: the bit-for-bit case below compares the two, on cases with
// every border (padding 0, 1, 2; 8 to 40 outputs wide; passes of one vector).
//
// Tolerance: the reference is the naive twin in double. Winograd's transforms add up to 4
// inputs, then 4 products, then 3 sums per output, each term bounded by the tile's |x| times
// the transformed weights (|G g G^T| <= 2.25 max |w|), so its float error is a small multiple of
// eps * sum |x| |w| over the window, not of eps * |y|: cancellation in y does not shrink it. The
// bound asserted is 16 * eps * sum |x| |w|, for Winograd and the direct kernel alike; both
// measured below 1 on these cases (random inputs let the rounding errors partly cancel). The
// weight gradient sums over every tile of the batch; its bound is the same 16 eps times
// sum |grad_out| |x| (measured: Winograd 0.4-1.3, direct 0.5-1.9).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd.h>
#include <echelon/tensor/cpu/fast/conv_winograd43.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>
#include <echelon/tensor/ops.h>

#include "tests/support/setting_scope.h"

namespace echelon {
namespace {

// The pool's thread count and the Winograd ISA and tile settings as they were when the case
// began, restored when it ends (also when a check throws); the case changes them freely.
struct WinogradScope {
  test::SettingScope<int> threads{cpu::fast::num_threads, cpu::fast::set_num_threads,
                                  cpu::fast::num_threads()};
  test::SettingScope<cpu::fast::WinogradIsa> isa{cpu::fast::conv_winograd_isa,
                                                 cpu::fast::set_conv_winograd_isa,
                                                 cpu::fast::conv_winograd_isa()};
  test::SettingScope<cpu::fast::WinogradTile> tile{cpu::fast::conv_winograd_tile,
                                                   cpu::fast::set_conv_winograd_tile,
                                                   cpu::fast::conv_winograd_tile()};
};

// Largest |y_bias - y - bias[o]| over the outputs: the forward with a bias (y_bias) against the
// same without (y), so the bias is added once per output, to the right channel.
double bias_error(const Conv2dGeometry& a, const std::vector<float>& y_bias,
                  const std::vector<float>& y, const std::vector<float>& bias) {
  const int64_t plane = a.out_h * a.out_w;
  double worst = 0;
  for (size_t i = 0; i < y.size(); ++i)
    worst = std::max(worst, std::abs(double(y_bias[i]) - double(y[i]) -
                                     double(bias[size_t(int64_t(i) / plane % a.o)])));
  return worst;
}

struct Case {
  int64_t n, c, h, w, o, pad;
};

Conv2dGeometry geometry(const Case& k) {
  Conv2dGeometry g;
  g.kernel_h = g.kernel_w = 3;
  g.pad_h = g.pad_w = k.pad;
  return g.for_input(k.n, k.c, k.h, k.w, k.o);
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<double> widen(const std::vector<float>& v, bool absolute) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = absolute ? std::abs(double(v[i])) : double(v[i]);
  return d;
}

// Largest |got - want| / (eps * scale): the error in units of float epsilon times sum |x| |w|.
double error_units(const std::vector<float>& got, const std::vector<double>& want,
                   const std::vector<double>& scale) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(double(got[i]) - want[i]);
    const double units = d / (std::numeric_limits<float>::epsilon() * (scale[i] + 1e-30));
    worst = std::max(worst, std::isnan(d) ? 1e30 : units);
  }
  return worst;
}

// The forward and backward-data references (the naive twin in double) and their scales (the
// twin on |x|, |w|, |grad_out|): sum |x| |w| per output, sum |grad_out| |w| per input pixel.
struct Reference {
  std::vector<double> y, y_scale, gx, gx_scale, gw, gw_scale;
};

Reference reference(const Conv2dGeometry& a, const std::vector<float>& x,
                    const std::vector<float>& w, const std::vector<float>& gy) {
  Reference r;
  const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
  r.y.resize(out);
  r.y_scale.resize(out);
  r.gx.resize(in);
  r.gx_scale.resize(in);
  cpu::conv2d_forward(a, widen(x, false).data(), widen(w, false).data(),
                      static_cast<const double*>(nullptr), r.y.data());
  cpu::conv2d_forward(a, widen(x, true).data(), widen(w, true).data(),
                      static_cast<const double*>(nullptr), r.y_scale.data());
  cpu::conv2d_backward_input(a, widen(gy, false).data(), widen(w, false).data(), r.gx.data());
  cpu::conv2d_backward_input(a, widen(gy, true).data(), widen(w, true).data(), r.gx_scale.data());
  r.gw.resize(w.size());
  r.gw_scale.resize(w.size());
  cpu::conv2d_backward_weight(a, widen(gy, false).data(), widen(x, false).data(), r.gw.data());
  cpu::conv2d_backward_weight(a, widen(gy, true).data(), widen(x, true).data(), r.gw_scale.data());
  return r;
}

const std::vector<Case> kCases = {
    {3, 16, 32, 32, 16, 1},  // ResNet-20 stage 1: 16 tile columns, joined quads
    {2, 32, 16, 16, 32, 1},  // stage 2: 8 tile columns, one vector per tile row
    {3, 64, 8, 8, 64, 1},    // stage 3: 4 tile columns, a vector's quads on two tile rows
    {2, 9, 6, 8, 8, 1},      // 3 quads: the last vector has no second quad; 9 = 6 + 3 channels
    {1, 8, 10, 22, 8, 2},    // padding 2: 12 x 24 outputs, 3 quads per tile row (forward only)
    {2, 8, 10, 18, 13, 0},   // padding 0: 8 x 16 outputs; 13 = 6 + 6 + 1 (forward only)
    {2, 13, 8, 16, 8, 0},    // backward only: padding 2 over grad_out (6 x 14), 13 = 6 + 6 + 1
    {2, 8, 12, 24, 11, 2},   // backward only: padding 0 over grad_out (14 x 26)
    {5, 11, 16, 24, 8, 1},   // 5 images over 3 threads, 11 input channels
    {1, 8, 8, 8, 112, 1},    // 112 = 7 x 16 channels: AVX-512 weight tiles of 4, 2 and 1 vectors
    // The AVX-512 transform's reads of the unpadded image (its masks at the image's borders):
    {2, 8, 10, 40, 8, 1},  // 5 quads per tile row: passes span tile rows; 13 vectors (odd)
    {3, 8, 4, 8, 9, 1},    // one vector per image: a pass with one vector only
    {1, 8, 10, 34, 8, 0},  // 32 outputs wide, padding 0 (backward: padding 2 over 8 x 32)
    {2, 8, 14, 30, 8, 2},  // 32 outputs wide, padding 2 (backward: padding 0 over 16 x 32)
};

}  // namespace

TEST_SUITE("fast_cpu") {
  TEST_CASE("winograd: forward and backward data within 16 eps sum|x||w| of the twin") {
    Conv2dGeometry probe = geometry(kCases[0]);
    if (!cpu::fast::conv_winograd_usable(probe)) return;  // no AVX2 + FMA on this CPU
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F2x2);  // F(4x4): its own case
    int forwards = 0, backwards = 0;
    // Both dispatch levels of the GEMM tiles where the CPU has AVX-512, at 1 and 3 threads.
    std::vector<std::pair<cpu::fast::WinogradIsa, int>> runs = {{cpu::fast::WinogradIsa::Avx2, 1},
                                                                {cpu::fast::WinogradIsa::Avx2, 3}};
    if (cpu::fast::conv_winograd_avx512_available())
      runs.insert(runs.end(),
                  {{cpu::fast::WinogradIsa::Avx512, 1}, {cpu::fast::WinogradIsa::Avx512, 3}});
    for (const auto& run : runs) {
      // Plain variables, not structured bindings: clang 14 cannot capture those in CAPTURE.
      const cpu::fast::WinogradIsa isa = run.first;
      const int threads = run.second;
      cpu::fast::set_conv_winograd_isa(isa);
      cpu::fast::set_num_threads(threads);
      for (const Case& k : kCases) {
        CAPTURE(isa == cpu::fast::WinogradIsa::Avx512);
        CAPTURE(threads);
        CAPTURE(k.c);
        CAPTURE(k.h);
        CAPTURE(k.w);
        CAPTURE(k.o);
        CAPTURE(k.pad);
        const Conv2dGeometry a = geometry(k);
        // Padding 0 or 2 turns into 2 or 0 for the backward: one of the two sizes fits.
        const bool forward = cpu::fast::conv_winograd_usable(a);
        const bool backward = cpu::fast::conv_winograd_backward_input_usable(a);
        REQUIRE((forward || backward));
        forwards += forward;
        backwards += backward;
        const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
        const auto x = random_values(in, 1), w = random_values(size_t(a.o * a.c * 9), 2),
                   b = random_values(size_t(a.o), 3), gy = random_values(out, 4);
        const Reference r = reference(a, x, w, gy);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> y(out, nan), gx(in, nan), yd(out, nan), gxd(in, nan), gw(w.size(), nan),
            gwd(w.size(), nan);
        if (backward) {
          cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), gx.data());
          CHECK(error_units(gx, r.gx, r.gx_scale) <= 16);
        }
        if (!forward) continue;
        cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, y.data());
        CHECK(error_units(y, r.y, r.y_scale) <= 16);
        cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw.data());
        CHECK(error_units(gw, r.gw, r.gw_scale) <= 16);
        // The other dispatch level (the direct kernel) on the same shape.
        cpu::fast::conv_direct_forward(a, x.data(), w.data(), nullptr, yd.data());
        CHECK(error_units(yd, r.y, r.y_scale) <= 16);
        cpu::fast::conv_direct_backward_weight(a, gy.data(), x.data(), gwd.data());
        CHECK(error_units(gwd, r.gw, r.gw_scale) <= 16);
        // Per-thread partials are added in chunk order: a second run is bit-identical.
        std::vector<float> again(w.size(), nan);
        cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), again.data());
        CHECK(again == gw);
        if (backward) {
          cpu::fast::conv_direct_backward_input(a, gy.data(), w.data(), gxd.data());
          CHECK(error_units(gxd, r.gx, r.gx_scale) <= 16);
        }
        // The bias: added once per output.
        std::vector<float> yb(out, nan);
        cpu::fast::conv_winograd_forward(a, x.data(), w.data(), b.data(), yb.data());
        CHECK(bias_error(a, yb, y, b) <= 1e-5);
      }
    }
    // Each direction ran on most cases, in every run.
    CHECK(forwards >= 6 * int(runs.size()));
    CHECK(backwards >= 6 * int(runs.size()));
  }

  TEST_CASE("winograd: the AVX-512 paths give the AVX2 values bit for bit, 1 and 3 threads") {
    // The same adds in the transforms and the same FMA chain per output (over the input channels;
    // over the tiles for the weight gradient): only the register widths differ.
    if (!cpu::fast::conv_winograd_avx512_available()) return;
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F2x2);
    for (const Case& k : kCases) {
      CAPTURE(k.c);
      CAPTURE(k.h);
      CAPTURE(k.w);
      CAPTURE(k.o);
      CAPTURE(k.pad);
      const Conv2dGeometry a = geometry(k);
      const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
      const auto x = random_values(in, 5), w = random_values(size_t(a.o * a.c * 9), 6),
                 b = random_values(size_t(a.o), 7), gy = random_values(out, 8);
      auto run = [&](cpu::fast::WinogradIsa isa, int threads) {
        cpu::fast::set_conv_winograd_isa(isa);
        cpu::fast::set_num_threads(threads);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> y(out, nan), gx(in, nan), gw(w.size(), nan);
        if (cpu::fast::conv_winograd_usable(a)) {
          cpu::fast::conv_winograd_forward(a, x.data(), w.data(), b.data(), y.data());
          cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw.data());
        }
        if (cpu::fast::conv_winograd_backward_input_usable(a))
          cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), gx.data());
        return std::tuple{y, gx, gw};
      };
      for (const int threads : {1, 3}) {
        CAPTURE(threads);
        // The weight gradient's partials per thread chunk: the same thread count both ways.
        const auto [y2, gx2, gw2] = run(cpu::fast::WinogradIsa::Avx2, threads);
        const auto [y5, gx5, gw5] = run(cpu::fast::WinogradIsa::Avx512, threads);
        // NaN where a direction does not take the case: compare the bits.
        CHECK(std::memcmp(y5.data(), y2.data(), out * sizeof(float)) == 0);
        CHECK(std::memcmp(gx5.data(), gx2.data(), in * sizeof(float)) == 0);
        CHECK(std::memcmp(gw5.data(), gw2.data(), gw2.size() * sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE("winograd F(4x4, 3x3): forward and backward data within 256 eps sum|x||w|") {
    // The bound (conv_winograd43.h): the transforms' terms reach 256 x sum |x| |w| before they
    // cancel, so the float error is of order eps x 256 x sum |x| |w|; measured 13-82 here (the
    // most with the non-negative inputs of the 2-thread runs), 177 at the corners of the
    // padding-2 8x8 case (a window of 1 pixel, a tile of 16). A wrong coefficient or tile is off
    // by ~1 x sum |x| |w|, 1e7 of these units. Where F(4x4) does not fit, F(2x2) runs.
    if (!cpu::fast::conv_winograd_avx512_available()) return;
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    cpu::fast::set_conv_winograd_isa(cpu::fast::WinogradIsa::Avx512);
    cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F4x4);
    // {case, F(4x4) forward, F(4x4) backward data}
    const std::vector<std::tuple<Case, bool, bool>> cases = {
        {{5, 16, 32, 32, 16, 1}, true, true},  // ResNet-20 stage 1: runs of 8 tiles, 2 tile rows
        {{1, 16, 32, 32, 16, 1}, true, true},  // one image
        {{5, 32, 16, 16, 32, 1}, true, true},  // stage 2: runs of 4 tiles, 4 tile rows
        {{5, 64, 8, 8, 64, 1}, true, true},    // stage 3: 4 images per vector; the last has 1
        {{1, 64, 8, 8, 64, 1}, true, true},    // one image: 12 lanes empty
        {{6, 9, 10, 10, 13, 0}, true, false},  // 8x8 out, padding 0; the last vector 2 images
        {{3, 11, 6, 6, 9, 2}, true, false},    // 8x8 out, padding 2 (backward: pad 0, 8 -> 6)
        {{7, 8, 8, 8, 10, 0}, false, true},    // backward only: pad 2 over grad_out 6 x 6
        {{2, 9, 18, 34, 13, 0}, true, false},  // padding 0: 16 x 32 out; 9 channels, 13 outputs
        {{2, 11, 14, 30, 9, 2}, true, false},  // padding 2: 16 x 32 out (pad 0 backward: 14 x 30)
        {{2, 13, 16, 32, 8, 0}, false, true},  // backward only: pad 2 over grad_out 14 x 30
        {{2, 8, 16, 32, 11, 2}, false, true},  // backward only: pad 0 over grad_out 18 x 34
        {{3, 8, 16, 64, 17, 1}, true, true},   // 16 tile columns: one run; 17 = 9 + 8 outputs
        {{1, 9, 4, 256, 8, 1}, true, true},    // 64 tile columns: 4 vectors on one tile row
        {{2, 8, 32, 16, 7, 1}, true, false},   // 7 output channels (backward: O = 7 < 8)
    };
    double worst_forward = 0, worst_backward = 0;
    for (const int threads : {1, 2}) {
      cpu::fast::set_num_threads(threads);
      for (const auto& entry : cases) {
        // Plain variables, not structured bindings: clang 14 cannot capture those in CAPTURE.
        const Case k = std::get<0>(entry);
        const bool f43_forward = std::get<1>(entry), f43_backward = std::get<2>(entry);
        CAPTURE(threads);
        CAPTURE(k.n);
        CAPTURE(k.c);
        CAPTURE(k.h);
        CAPTURE(k.w);
        CAPTURE(k.o);
        CAPTURE(k.pad);
        const Conv2dGeometry a = geometry(k);
        Conv2dGeometry t;  // the backward-data geometry
        t.kernel_h = t.kernel_w = 3;
        t.pad_h = t.pad_w = 2 - k.pad;
        t = t.for_input(a.n, a.o, a.out_h, a.out_w, a.c);
        CHECK(cpu::fast::conv_winograd_f43_chosen(a) == f43_forward);
        CHECK(cpu::fast::conv_winograd_f43_chosen(t) == f43_backward);
        const auto in = size_t(a.n * a.c * a.h * a.w), out = size_t(a.n * a.o * a.out_h * a.out_w);
        auto x = random_values(in, 11);
        const auto w = random_values(size_t(a.o * a.c * 9), 12), b = random_values(size_t(a.o), 13),
                   gy = random_values(out, 14);
        // ResNet's inputs come out of a ReLU: non-negative (no sign cancellation in B^T d B).
        if (threads == 2)
          for (float& v : x) v = std::max(v, 0.0f);
        const Reference r = reference(a, x, w, gy);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> y(out, nan), yb(out, nan), gx(in, nan);
        if (cpu::fast::conv_winograd_usable(a)) {
          cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, y.data());
          const double e = error_units(y, r.y, r.y_scale);
          CHECK(e <= 256);
          if (f43_forward) worst_forward = std::max(worst_forward, e);
          // The bias: added once per output.
          cpu::fast::conv_winograd_forward(a, x.data(), w.data(), b.data(), yb.data());
          CHECK(bias_error(a, yb, y, b) <= 1e-5);
        }
        if (cpu::fast::conv_winograd_backward_input_usable(a)) {
          cpu::fast::conv_winograd_backward_input(a, gy.data(), w.data(), gx.data());
          const double e = error_units(gx, r.gx, r.gx_scale);
          CHECK(e <= 256);
          if (f43_backward) worst_backward = std::max(worst_backward, e);
        }
      }
    }
    MESSAGE("F(4x4, 3x3) worst error, eps x sum |x| |w|: forward ", worst_forward,
            ", backward data ", worst_backward);
    CHECK(worst_forward > 0);  // F(4x4) ran
    CHECK(worst_backward > 0);
  }

  TEST_CASE("winograd F(4x4, 3x3): the usable() rules") {
    auto usable = [](const Case& k) { return cpu::fast::conv_winograd43_usable(geometry(k)); };
    if (!usable({2, 16, 32, 32, 16, 1})) return;  // no AVX-512 here
    CHECK(usable({2, 16, 16, 16, 16, 1}));
    CHECK(usable({2, 8, 16, 64, 16, 1}));         // 16 tile columns
    CHECK(usable({2, 8, 8, 128, 16, 1}));         // 32 tile columns, 2 tile rows
    CHECK(usable({2, 64, 8, 8, 64, 1}));          // 2 x 2 tiles: 4 images per vector
    CHECK_FALSE(usable({2, 16, 16, 8, 16, 1}));   // 2 tile columns, 4 tile rows
    CHECK_FALSE(usable({2, 16, 32, 24, 16, 1}));  // 6 tile columns
    CHECK_FALSE(usable({2, 16, 28, 32, 16, 1}));  // 7 tile rows
    CHECK_FALSE(usable({2, 16, 12, 16, 16, 1}));  // 3 tile rows of 4 columns: 12 tiles
    CHECK_FALSE(usable({2, 16, 30, 32, 16, 1}));  // out_h 30
    CHECK_FALSE(usable({2, 7, 32, 32, 16, 1}));   // C = 7
    CHECK_FALSE(usable({2, 16, 32, 32, 16, 3}));  // pad 3
    Conv2dGeometry strided = geometry({2, 16, 32, 32, 16, 1});
    strided.stride_h = strided.stride_w = 2;
    CHECK_FALSE(cpu::fast::conv_winograd43_usable(strided.for_input(2, 16, 64, 64, 16)));
    CHECK_THROWS(cpu::fast::conv_winograd43_forward(geometry({1, 16, 28, 32, 16, 1}), nullptr,
                                                    nullptr, nullptr, nullptr));
  }

  TEST_CASE("winograd F(4x4, 3x3) weight gradient: within 256 eps sum|gy||x|, 1 and 3 threads") {
    // The transpose of the forward (conv_winograd43.h): the same transforms' growth, so the same
    // bound in units of eps x sum |grad_out| |x| over each weight's window. Cases: ResNet-20's
    // three shapes (the 8x8 one with a last vector of 1 image of 4), padding 0 and 2, runs of
    // 16 tiles and 4 vectors per tile row, 9 to 40 input channels and 8 to 36 output channels
    // (op rounded up to 16), passes of 4 vectors spanning images (dU over 64 KiB: 32 and 40+).
    if (!cpu::fast::conv_winograd_avx512_available()) return;
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    cpu::fast::set_conv_winograd_isa(cpu::fast::WinogradIsa::Avx512);
    cpu::fast::set_conv_winograd_tile(cpu::fast::WinogradTile::F4x4);
    const std::vector<Case> cases = {
        {3, 16, 32, 32, 16, 1}, {3, 32, 16, 16, 32, 1}, {5, 64, 8, 8, 64, 1},
        {6, 9, 10, 10, 13, 0},  {3, 11, 6, 6, 9, 2},    {2, 8, 16, 64, 17, 1},
        {1, 9, 4, 256, 8, 1},   {2, 9, 18, 34, 13, 0},  {3, 40, 16, 16, 36, 1},
    };
    double worst = 0;
    for (const Case& k : cases) {
      CAPTURE(k.n);
      CAPTURE(k.c);
      CAPTURE(k.h);
      CAPTURE(k.w);
      CAPTURE(k.o);
      CAPTURE(k.pad);
      const Conv2dGeometry a = geometry(k);
      REQUIRE(cpu::fast::conv_winograd_f43_chosen(a));
      auto x = random_values(size_t(a.n * a.c * a.h * a.w), 21);
      for (float& v : x) v = std::max(v, 0.0f);  // ResNet's inputs come out of a ReLU
      const auto w = random_values(size_t(a.o * a.c * 9), 22),
                 gy = random_values(size_t(a.n * a.o * a.out_h * a.out_w), 23);
      const Reference r = reference(a, x, w, gy);
      for (const int threads : {1, 3}) {
        CAPTURE(threads);
        cpu::fast::set_num_threads(threads);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::vector<float> gw(w.size(), nan), again(w.size(), nan);
        // NaN in this thread's scratch: the lanes of missing images must be written, not read.
        float* scratch = cpu::fast::scratch<float>(0, size_t{1} << 20);
        std::fill(scratch, scratch + (size_t{1} << 20), nan);
        cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw.data());
        const double e = error_units(gw, r.gw, r.gw_scale);
        CHECK(e <= 256);
        worst = std::max(worst, e);
        // Per-chunk partials added in chunk order: a second run is bit-identical.
        cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), again.data());
        CHECK(std::memcmp(again.data(), gw.data(), gw.size() * sizeof(float)) == 0);
      }
    }
    MESSAGE("F(4x4, 3x3) weight gradient worst error, eps x sum |gy| |x|: ", worst);
    // An empty batch: no chunk runs, and the gradient is 0, not the partials' old contents.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    float* partials = cpu::fast::scratch<float>(1, size_t{1} << 16);
    std::fill(partials, partials + (size_t{1} << 16), nan);
    std::vector<float> gw0(size_t(16 * 16 * 9), nan);
    cpu::fast::conv_winograd_backward_weight(geometry({0, 16, 32, 32, 16, 1}), nullptr, nullptr,
                                             gw0.data());
    CHECK(std::all_of(gw0.begin(), gw0.end(), [](float v) { return v == 0.0f; }));
  }

  TEST_CASE(
      "winograd weight gradient: odd channels, batch 1 and 5, passes over images, 1/2 threads") {
    // The weight gradient runs passes of 16-tile blocks (two vectors; one where an image has an
    // odd count): 1 block while dU (16 C O floats) fits in 64 KiB, else 4, which then span images
    // and end part-full at a chunk's end.
    if (!cpu::fast::conv_winograd_usable(geometry({1, 8, 8, 8, 8, 1}))) return;
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    const std::vector<Case> cases = {
        {1, 9, 8, 16, 13, 1},   // batch 1, 2 vectors (one block), 13 = 8 + 5 output channels
        {5, 13, 8, 16, 7, 1},   // batch 5 over 2 threads: chunks of 3 and 2 images
        {5, 17, 12, 8, 33, 1},  // 3 vectors per image: a block with one vector
        {5, 40, 4, 8, 36, 1},   // dU 30720 floats: passes of 4 one-vector blocks over 4 images
        {5, 48, 8, 16, 24, 1},  // passes of 4 blocks, 2 per image, the last part-full
    };
    std::vector<cpu::fast::WinogradIsa> isas = {cpu::fast::WinogradIsa::Avx2};
    if (cpu::fast::conv_winograd_avx512_available()) isas.push_back(cpu::fast::WinogradIsa::Avx512);
    for (const Case& k : cases) {
      CAPTURE(k.n);
      CAPTURE(k.c);
      CAPTURE(k.h);
      CAPTURE(k.w);
      CAPTURE(k.o);
      const Conv2dGeometry a = geometry(k);
      REQUIRE(cpu::fast::conv_winograd_usable(a));
      const auto x = random_values(size_t(a.n * a.c * a.h * a.w), 11),
                 w = random_values(size_t(a.o * a.c * 9), 12),
                 gy = random_values(size_t(a.n * a.o * a.out_h * a.out_w), 13);
      const Reference r = reference(a, x, w, gy);
      for (const int threads : {1, 2}) {
        CAPTURE(threads);
        cpu::fast::set_num_threads(threads);
        std::vector<std::vector<float>> per_isa;
        for (const cpu::fast::WinogradIsa isa : isas) {
          CAPTURE(isa == cpu::fast::WinogradIsa::Avx512);
          cpu::fast::set_conv_winograd_isa(isa);
          const float nan = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> gw(w.size(), nan), again(w.size(), nan);
          // NaN in this thread's scratch, as another kernel may leave it: a one-vector block's
          // missing tiles must be written (V and Z 0), not read as whatever was there.
          float* scratch = cpu::fast::scratch<float>(0, size_t{1} << 20);
          std::fill(scratch, scratch + (size_t{1} << 20), nan);
          cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), gw.data());
          CHECK(error_units(gw, r.gw, r.gw_scale) <= 16);
          cpu::fast::conv_winograd_backward_weight(a, gy.data(), x.data(), again.data());
          CHECK(std::memcmp(again.data(), gw.data(), gw.size() * sizeof(float)) == 0);
          per_isa.push_back(gw);
        }
        // Both dispatch levels run the same FMA chain per dU entry.
        if (per_isa.size() == 2)
          CHECK(std::memcmp(per_isa[0].data(), per_isa[1].data(), w.size() * sizeof(float)) == 0);
      }
    }
  }

  TEST_CASE("winograd: takes 3x3 / stride 1 / pad 0..2 / out_w % 8 == 0 / even out_h / C >= 8") {
    const Conv2dGeometry resnet = geometry({2, 16, 32, 32, 16, 1});
    if (!cpu::fast::conv_winograd_usable(resnet)) return;
    CHECK(cpu::fast::conv_winograd_backward_input_usable(resnet));
    CHECK_FALSE(cpu::fast::conv_winograd_usable(geometry({2, 16, 31, 32, 16, 1})));  // odd out_h
    CHECK_FALSE(cpu::fast::conv_winograd_usable(geometry({2, 16, 32, 28, 16, 1})));  // out_w 28
    CHECK_FALSE(cpu::fast::conv_winograd_usable(geometry({2, 7, 32, 32, 16, 1})));   // C = 7
    CHECK_FALSE(cpu::fast::conv_winograd_usable(geometry({2, 16, 32, 32, 16, 3})));  // pad 3
    // Backward data needs O >= 8 and grad_in (H, W) of the forward's shape rules.
    CHECK(cpu::fast::conv_winograd_usable(geometry({2, 16, 32, 32, 4, 1})));
    CHECK_FALSE(cpu::fast::conv_winograd_backward_input_usable(geometry({2, 16, 32, 32, 4, 1})));
    CHECK_FALSE(cpu::fast::conv_winograd_backward_input_usable(geometry({2, 16, 30, 30, 16, 0})));
    Conv2dGeometry strided = resnet;
    strided.stride_h = strided.stride_w = 2;
    CHECK_FALSE(cpu::fast::conv_winograd_usable(strided.for_input(2, 16, 32, 32, 16)));
    Conv2dGeometry dilated = resnet;
    dilated.dilation_h = dilated.dilation_w = 2;
    CHECK_FALSE(cpu::fast::conv_winograd_usable(dilated.for_input(2, 16, 36, 36, 16)));
    Conv2dGeometry five;
    five.kernel_h = five.kernel_w = 5;
    five.pad_h = five.pad_w = 2;
    CHECK_FALSE(cpu::fast::conv_winograd_usable(five.for_input(2, 16, 32, 32, 16)));
    CHECK_THROWS(cpu::fast::conv_winograd_forward(strided.for_input(1, 16, 32, 32, 16), nullptr,
                                                  nullptr, nullptr, nullptr));
    // The default GEMM tiles are the widest the CPU has.
    CHECK((cpu::fast::conv_winograd_isa() == cpu::fast::WinogradIsa::Avx512) ==
          cpu::fast::conv_winograd_avx512_available());
    if (!cpu::fast::conv_winograd_avx512_available())
      CHECK_THROWS(cpu::fast::set_conv_winograd_isa(cpu::fast::WinogradIsa::Avx512));
  }

  TEST_CASE("winograd through ops::conv2d: a non-contiguous input, fast vs naive kernels") {
    const Conv2dGeometry a = geometry({2, 16, 16, 16, 16, 1});
    if (!cpu::fast::conv_winograd_usable(a)) return;
    Generator gen(7);
    // Channels 4..19 of a 24-channel tensor: a non-contiguous view.
    const Tensor big = ops::randn({2, 24, 16, 16}, gen, kFloat32, Device::cpu());
    const Tensor x = big.narrow(1, 4, 16);
    REQUIRE_FALSE(x.is_contiguous());
    const Tensor w = ops::randn({16, 16, 3, 3}, gen, kFloat32, Device::cpu());
    const Tensor b = ops::randn({16}, gen, kFloat32, Device::cpu());
    const test::SettingScope<ops::CpuKernels> kernels(ops::cpu_kernels, ops::set_cpu_kernels,
                                                      ops::CpuKernels::Naive);
    const std::vector<float> want = ops::conv2d(x, w, b, a).to_vector<float>();
    ops::set_cpu_kernels(ops::CpuKernels::Fast);
    const std::vector<float> got = ops::conv2d(x, w, b, a).to_vector<float>();
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, std::abs(double(got[i]) - double(want[i])));
    // |x| ~ N(0, 1), |w| ~ N(0, 1): sum |x| |w| over 144 taps is about 92, 64 eps of it 7e-4.
    CHECK(worst <= 1e-3);
  }

  TEST_CASE("winograd: an Inf input gives non-finite outputs where its window reads it") {
    const Case k{1, 8, 16, 16, 8, 1};
    const Conv2dGeometry a = geometry(k);
    if (!cpu::fast::conv_winograd_usable(a)) return;
    auto x = random_values(size_t(8 * 16 * 16), 5);
    const auto w = random_values(size_t(8 * 8 * 9), 6);
    x[size_t((3 * 16 + 7) * 16 + 9)] = std::numeric_limits<float>::infinity();  // c 3, (7, 9)
    const WinogradScope restore;  // restores the thread count, ISA and tile when the case ends
    // Winograd also spoils the rest of the input tiles holding the pixel (Inf - Inf in the
    // transforms): F(2x2)'s 4x4 tiles reach 3 outputs from it, F(4x4)'s 6x6 tiles 4.
    for (const auto& [tile, reach] : {std::pair{cpu::fast::WinogradTile::F2x2, 3},
                                      std::pair{cpu::fast::WinogradTile::F4x4, 4}}) {
      cpu::fast::set_conv_winograd_tile(tile);
      std::vector<float> y(size_t(8 * 16 * 16));
      cpu::fast::conv_winograd_forward(a, x.data(), w.data(), nullptr, y.data());
      const int spoiled = reach;  // clang 14 cannot capture a structured binding
      CAPTURE(spoiled);
      for (int64_t o = 0; o < 8; ++o)
        for (int64_t r = 0; r < 16; ++r)
          for (int64_t c = 0; c < 16; ++c) {
            CAPTURE(o);
            CAPTURE(r);
            CAPTURE(c);
            const float v = y[size_t((o * 16 + r) * 16 + c)];
            // Outputs whose window holds (7, 9) are non-finite, as the twin's; outputs beyond
            // the spoiled tiles stay finite.
            if (std::abs(r - 7) <= 1 && std::abs(c - 9) <= 1)
              CHECK_FALSE(std::isfinite(v));
            else if (std::abs(r - 7) > spoiled || std::abs(c - 9) > spoiled)
              CHECK(std::isfinite(v));
          }
    }
  }
}

}  // namespace echelon
