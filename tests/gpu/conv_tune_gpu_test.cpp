// The convolution autotuner (cuda/kernels/conv_tune.h): every candidate it may pick matches the
// CPU twin (the parity that makes tuning safe), it picks the fastest of scripted timings and
// caches the pick per (device, pass, geometry, precision), it never times during stream capture,
// and with tuning off it runs the heuristic.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>

#include "tests/support/parity.h"

using namespace echelon;

namespace {

struct Geometry {
  const char* name;
  Shape x, w;
  int64_t stride, pad, dilation;
};

// Odd sizes, stride 2 with dilation, a 1x1 (R = 20: the warp-tiled core's float4 weights), fewer
// than 8 input channels; 12 to 33 filters, so the 16- and 32-row tiles' gather tables apply.
const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> all = {
      {"odd_3x3", {2, 9, 7, 5}, {12, 9, 3, 3}, 1, 1, 1},
      {"s2_d2", {2, 10, 9, 7}, {20, 10, 3, 3}, 2, 1, 2},
      {"1x1_r20", {2, 20, 5, 6}, {33, 20, 1, 1}, 1, 0, 1},
      {"c3", {2, 3, 9, 8}, {6, 3, 3, 3}, 1, 1, 1},
  };
  return all;
}

Conv2dGeometry full_geometry(const Geometry& c) {
  Conv2dGeometry g;
  g.kernel_h = c.w[2], g.kernel_w = c.w[3];
  g.stride_h = g.stride_w = c.stride;
  g.pad_h = g.pad_w = c.pad;
  g.dilation_h = g.dilation_w = c.dilation;
  return g.for_input(c.x[0], c.x[1], c.x[2], c.x[3], c.w[0]);
}

// The operands on the device and the CPU twin's results on inputs rounded as `precision` rounds.
struct Problem {
  Conv2dGeometry g;
  Tensor x, w, bias, gy;              // device
  Tensor y, grad_input, grad_weight;  // CPU twin
  Problem(const Geometry& c, Precision precision) : g(full_geometry(c)) {
    const Tensor cx = parity::random_cpu(c.x, 1), cw = parity::random_cpu(c.w, 2),
                 cb = parity::random_cpu({c.w[0]}, 3);
    const Tensor cgy = parity::random_cpu({g.n, g.o, g.out_h, g.out_w}, 4);
    x = cx.to(Device::cuda(0)), w = cw.to(Device::cuda(0)), bias = cb.to(Device::cuda(0));
    gy = cgy.to(Device::cuda(0));
    Conv2dGeometry window = g;
    const Tensor rx = parity::rounded_as(cx, precision), rw = parity::rounded_as(cw, precision);
    const Tensor rgy = parity::rounded_as(cgy, precision);
    y = ops::conv2d(rx, rw, cb, window);
    const ops::Conv2dGrads grads = ops::conv2d_backward(rgy, rx, rw, true, true, window);
    grad_input = grads.input, grad_weight = grads.weight;
  }
  cuda::ConvCall call(cuda::ConvPass pass, Tensor& out) const {
    cuda::ConvCall c;
    c.pass = pass;
    c.geometry = g;
    c.x = x.data<float>(), c.w = w.data<float>(), c.grad_out = gy.data<float>();
    c.bias = bias.data<float>();
    c.out = out.data<float>();
    c.device = 0;
    c.stream = cuda::current_stream(0);
    return c;
  }
  const Tensor& want(cuda::ConvPass pass) const {
    return pass == cuda::ConvPass::Forward        ? y
           : pass == cuda::ConvPass::BackwardData ? grad_input
                                                  : grad_weight;
  }
};

constexpr cuda::ConvPass kPasses[] = {cuda::ConvPass::Forward, cuda::ConvPass::BackwardData,
                                      cuda::ConvPass::BackwardWeight};

struct PrecisionScope {
  explicit PrecisionScope(Precision p) {
    ops::set_conv_impl(ops::ConvImpl::Ours);
    ops::set_float32_precision(p);
  }
  ~PrecisionScope() { ops::set_float32_precision(Precision::Fp32); }
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;
};

// Tuning on with a scripted timer for a scope; the cache cleared before and after.
struct TuneScope {
  explicit TuneScope(cuda::ConvTuneTimer timer) {
    cuda::clear_conv_tune_cache();
    cuda::set_conv_tune_timer(std::move(timer));
    cuda::set_conv_autotune(true);
  }
  ~TuneScope() {
    cuda::set_conv_autotune(false);
    cuda::set_conv_tune_timer({});
    cuda::clear_conv_tune_cache();
  }
  TuneScope(const TuneScope&) = delete;
  TuneScope& operator=(const TuneScope&) = delete;
};

}  // namespace

TEST_SUITE("conv_tune_gpu") {
  TEST_CASE("every candidate the tuner may pick matches the CPU twin, each precision") {
    REQUIRE_FALSE(cuda::conv_autotune());
    for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
      PrecisionScope scope(precision);
      for (const Geometry& c : geometries()) {
        const Problem p(c, precision);
        for (const cuda::ConvPass pass : kPasses) {
          const std::vector<cuda::ConvConfig> candidates = cuda::conv_candidates(pass, p.g);
          // The implicit GEMM's four tiles at least, and the columns path.
          CHECK(candidates.size() >= 5);
          CHECK(candidates.back().im2col);
          const cuda::ConvConfig heuristic = cuda::conv_heuristic(pass, p.g);
          bool has_heuristic = false;
          for (const cuda::ConvConfig& config : candidates) {
            has_heuristic = has_heuristic || config == heuristic;
            Tensor out =
                Tensor::full(p.want(pass).shape(), std::nanf(""), kFloat32, Device::cuda(0));
            cuda::run_conv(p.call(pass, out), config);
            // Sums of up to ~200 products of values in [-1, 1); the weight gradient's split-K
            // changes the order of its sums.
            const parity::Tolerance tol = pass == cuda::ConvPass::BackwardWeight
                                              ? parity::Tolerance{5e-4, 1e-4}
                                              : parity::Tolerance{1e-4, 1e-4};
            const parity::Comparison cmp = parity::compare(out.cpu(), p.want(pass), tol);
            CHECK_MESSAGE(cmp.ok, c.name, " ", name(precision), " ", cuda::name(pass), " ",
                          cuda::to_string(config), ": ", cmp.summary());
          }
          CHECK_MESSAGE(has_heuristic, c.name, " ", cuda::name(pass), " ",
                        cuda::to_string(heuristic));
        }
      }
    }
  }

  TEST_CASE("the candidates: both FMA cores, the table on and off, a split-K ladder") {
    // 33 x 20 forward (1x1, R = 20): the fp32 128x128 tile with both cores, each with and
    // without the gather table (every register-staged tile has it since session 40); odd_3x3's 12
    // filters: the 16-row tile with and without its table; a weight gradient deep enough for
    // several split-K counts (K = 15 * 13 = 195: 25 fp32 k-slices of 8, at most 7 groups).
    const auto count = [](const std::vector<cuda::ConvConfig>& all, auto&& pred) {
      int n = 0;
      for (const cuda::ConvConfig& c : all) n += pred(c) ? 1 : 0;
      return n;
    };
    const std::vector<cuda::ConvConfig> fwd =
        cuda::conv_candidates(cuda::ConvPass::Forward, full_geometry(geometries()[2]));
    CHECK(count(fwd, [](const cuda::ConvConfig& c) {
            return c.tile == cuda::ConvTile::Large && !c.im2col;
          }) == 4);
    CHECK(count(fwd, [](const cuda::ConvConfig& c) {
            return c.tile == cuda::ConvTile::Large && !c.im2col && c.table;
          }) == 2);
    // odd_3x3's forward is deep enough for split-K in the emulation (K = 81 >= 64: 11 k-slices of
    // 8, so 1, 2 and 3 groups of >= 4 slices), each with and without the table.
    const std::vector<cuda::ConvConfig> tiny =
        cuda::conv_candidates(cuda::ConvPass::Forward, full_geometry(geometries()[0]));
    std::vector<int64_t> tiny_groups;
    for (const cuda::ConvConfig& c : tiny)
      if (c.tile == cuda::ConvTile::Tiny && !c.im2col && c.table) tiny_groups.push_back(c.groups);
    CHECK(count(tiny, [](const cuda::ConvConfig& c) {
            return c.tile == cuda::ConvTile::Tiny && !c.im2col && !c.table;
          }) == 3);
    CHECK(tiny_groups == std::vector<int64_t>{1, 2, 3});
    Conv2dGeometry deep;
    deep.kernel_h = deep.kernel_w = 3;
    deep = deep.for_input(1, 8, 17, 15, 16);
    const std::vector<cuda::ConvConfig> wgrad =
        cuda::conv_candidates(cuda::ConvPass::BackwardWeight, deep);
    std::vector<int64_t> groups, direct;
    for (const cuda::ConvConfig& c : wgrad) {
      if (c.direct) direct.push_back(c.groups);
      if (c.tile == cuda::ConvTile::Small && !c.im2col && !c.direct) groups.push_back(c.groups);
    }
    CHECK(groups == std::vector<int64_t>{1, 2, 4, 7});  // 7 groups of 4 slices (the last 1)
    // 16 filters 3x3 over 8 channels: the direct weight gradient too (48 work items), at 1 block
    // and up to one block per chunk (conv_direct.h), before the columns path.
    REQUIRE(cuda::wgrad_direct_fits(deep));
    REQUIRE(direct.size() >= 2);
    CHECK(direct.front() == 1);
    CHECK(direct.back() == cuda::wgrad_direct_most_groups(deep));
    CHECK(wgrad.back().im2col);
    // TF32: the 128x128 tile's forward and weight gradient also on the async-K tiles at 2 and 4
    // stages (weights rows of R = 128, grad_out planes of 144: runs of 4); grad input, fp32 and
    // bf16 never. The heuristic's: off unless set_mma_async_k (ECHELON_MMA_ASYNC_K=1), then
    // mma_stages()'s depth. The gather tiles (async_gather) likewise at 2 and 4 stages, in every
    // pass, never with async_k; the heuristic's from set_conv_async_gather (before async_k).
    // Neither async ring has a table: they are listed once, without, where the register ring's
    // forward and grad input come with the table and without (its grad weight: the switch's).
    // 128 channels, 12x12: M, N >= 128 in every pass.
    Conv2dGeometry wide;
    wide = wide.for_input(1, 128, 12, 12, 128);
    const auto rings = [&](cuda::ConvPass pass, bool async_k, int stages,
                           bool async_gather = false) {
      int n = 0;
      for (const cuda::ConvConfig& c : cuda::conv_candidates(pass, wide)) {
        CHECK(
            ((!c.async_k && !c.async_gather && c.stages == 2) || c.tile == cuda::ConvTile::Large));
        CHECK_FALSE((c.async_k && c.async_gather));
        CHECK_FALSE((c.table && (c.async_k || c.async_gather)));
        n += c.tile == cuda::ConvTile::Large && !c.im2col && c.async_k == async_k &&
                     c.async_gather == async_gather && c.stages == stages
                 ? 1
                 : 0;
      }
      return n;
    };
    CHECK(rings(cuda::ConvPass::Forward, true, 2) == 0);  // fp32
    CHECK(rings(cuda::ConvPass::Forward, false, 2, true) == 0);
    // fp32's heuristic: the weight gradient (M = 128, N = 1152) on the 128x128 tile, its split-K
    // supplying the blocks; the forward, 2 such tiles, on the 64x64 one.
    CHECK(cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, wide).tile == cuda::ConvTile::Large);
    CHECK(cuda::conv_heuristic(cuda::ConvPass::Forward, wide).tile == cuda::ConvTile::Small);
    for (const cuda::ConvPass pass : kPasses) {
      CAPTURE(cuda::name(pass));
      PrecisionScope tf32(Precision::Tf32);
      const int tables = pass == cuda::ConvPass::BackwardWeight ? 1 : 2;  // table on and off
      const int plain = rings(pass, false, 2), per_table = plain / tables;
      const int expected = pass == cuda::ConvPass::BackwardData ? 0 : per_table;
      CHECK(plain >= tables);
      CHECK(plain % tables == 0);
      CHECK(rings(pass, true, 2) == expected);
      CHECK(rings(pass, true, cuda::mma_deep_stages()) == expected);
      CHECK(rings(pass, false, cuda::mma_deep_stages()) == 0);
      CHECK(rings(pass, false, 2, true) == per_table);
      CHECK(rings(pass, false, cuda::mma_deep_stages(), true) == per_table);
      cuda::set_mma_tile(cuda::MmaTile::Large);  // the heuristic's tile: 128x128
      CHECK(cuda::conv_heuristic(pass, wide).tile == cuda::ConvTile::Large);
      CHECK_FALSE(cuda::conv_heuristic(pass, wide).async_k);
      CHECK_FALSE(cuda::conv_heuristic(pass, wide).async_gather);
      CHECK(cuda::conv_heuristic(pass, wide).table);  // the register ring's, every pass
      cuda::set_mma_async_k(true);
      CHECK(cuda::conv_heuristic(pass, wide).async_k == (expected > 0));
      CHECK(cuda::conv_heuristic(pass, wide).table == (expected == 0));
      CHECK(cuda::conv_heuristic(pass, wide).stages == 2);
      cuda::set_mma_stages(cuda::mma_deep_stages());
      const std::string deep = cuda::to_string(cuda::conv_heuristic(pass, wide));
      CHECK((deep.find("async-k stages=4") != std::string::npos) == (expected > 0));
      REQUIRE_FALSE(cuda::conv_async_gather());  // the default: ECHELON_CONV_ASYNC_GATHER unset
      cuda::set_conv_async_gather(true);
      const cuda::ConvConfig gather = cuda::conv_heuristic(pass, wide);
      CHECK((gather.async_gather && !gather.async_k && gather.stages == 4 && !gather.table));
      CHECK(cuda::to_string(gather).find("async-gather stages=4") != std::string::npos);
      cuda::set_mma_stages(2);
      CHECK(cuda::conv_heuristic(pass, wide).stages == 2);
      cuda::set_conv_async_gather(false);
      cuda::set_mma_async_k(false);
      cuda::set_mma_tile(cuda::MmaTile::Auto);
    }
    PrecisionScope bf16(Precision::Bf16);
    CHECK(rings(cuda::ConvPass::Forward, true, 2) == 0);
    CHECK(rings(cuda::ConvPass::Forward, false, 2, true) == 0);
    cuda::set_conv_async_gather(true);  // the switch moves TF32 only
    CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::Forward, wide).async_gather);
    cuda::set_conv_async_gather(false);
  }

  TEST_CASE("scripted timings: the fastest is picked, cached per key, re-tuned per shape") {
    std::map<std::string, int> calls;  // per pass and geometry
    const auto key = [](const cuda::ConvCall& c) {
      return std::string(cuda::name(c.pass)) + " " + cuda::describe(c.geometry) + " " +
             name(cuda::float32_precision());
    };
    // The last candidate is the fastest (1 ms), the heuristic 5 ms, the others 10 ms and up, the
    // slowest last but one.
    const auto timer = [&](const cuda::ConvCall& c, const cuda::ConvConfig& config) {
      ++calls[key(c)];
      const std::vector<cuda::ConvConfig> all = cuda::conv_candidates(c.pass, c.geometry);
      if (config == all.back()) return 1.0;
      if (config == cuda::conv_heuristic(c.pass, c.geometry)) return 5.0;
      double ms = 10.0;
      for (const cuda::ConvConfig& other : all) {
        if (other == config) break;
        ms += 1.0;
      }
      return ms;
    };
    TuneScope tuning(timer);
    PrecisionScope scope(Precision::Fp32);
    const Problem p(geometries()[0], Precision::Fp32);
    for (const cuda::ConvPass pass : kPasses) {
      Tensor out = Tensor::full(p.want(pass).shape(), std::nanf(""), kFloat32, Device::cuda(0));
      const cuda::ConvCall call = p.call(pass, out);
      const std::vector<cuda::ConvConfig> all = cuda::conv_candidates(pass, p.g);
      const cuda::ConvConfig pick = cuda::conv_config_for(call);
      CHECK_MESSAGE(pick == all.back(), cuda::name(pass), ": ", cuda::to_string(pick));
      CHECK(calls[key(call)] == static_cast<int>(all.size()));
      // Cached: the same pick, no timing.
      CHECK(cuda::conv_config_for(call) == pick);
      CHECK(calls[key(call)] == static_cast<int>(all.size()));
    }
    const std::vector<cuda::ConvTunePick> picks = cuda::conv_tune_picks();
    REQUIRE(picks.size() == 3);
    CHECK(picks[0].pass == cuda::ConvPass::Forward);
    CHECK(picks[0].tuned_ms == 1.0);
    CHECK(picks[0].heuristic_ms == 5.0);
    CHECK(picks[0].pick == "im2col");  // the last candidate
    CHECK(picks[0].heuristic ==
          cuda::to_string(cuda::conv_heuristic(cuda::ConvPass::Forward, p.g)));

    // A new batch size and a new precision are new keys; the public pass runs the pick and
    // still matches the twin.
    const size_t before = calls.size();
    Tensor y = ops::conv2d(p.x.narrow(0, 0, 1), p.w, p.bias, p.g);
    CHECK(calls.size() == before + 1);
    CHECK(cuda::conv_tune_picks().size() == 4);
    const Tensor want = ops::conv2d(p.x.narrow(0, 0, 1).cpu(), p.w.cpu(), p.bias.cpu(), p.g);
    const parity::Comparison cmp = parity::compare(y.cpu(), want, {1e-4, 1e-4});
    CHECK_MESSAGE(cmp.ok, cmp.summary());
    {
      PrecisionScope tf32(Precision::Tf32);
      Tensor out = Tensor::full(p.y.shape(), std::nanf(""), kFloat32, Device::cuda(0));
      (void)cuda::conv_config_for(p.call(cuda::ConvPass::Forward, out));
    }
    CHECK(calls.size() == before + 2);
    CHECK(cuda::conv_tune_picks().back().precision == Precision::Tf32);
  }

  TEST_CASE("a candidate that fails to run is skipped; the heuristic's failure is the caller's") {
    PrecisionScope scope(Precision::Fp32);
    const Problem p(geometries()[0], Precision::Fp32);
    const cuda::ConvPass pass = cuda::ConvPass::BackwardWeight;
    const cuda::ConvConfig heuristic = cuda::conv_heuristic(pass, p.g);
    const std::vector<cuda::ConvConfig> all = cuda::conv_candidates(pass, p.g);
    std::vector<cuda::ConvConfig> others;
    for (const cuda::ConvConfig& c : all)
      if (!(c == heuristic)) others.push_back(c);
    REQUIRE(others.size() >= 2);
    Tensor out = Tensor::full(p.want(pass).shape(), std::nanf(""), kFloat32, Device::cuda(0));
    const cuda::ConvCall call = p.call(pass, out);
    {
      // The fastest candidate throws (as an out-of-memory would); the next fastest is picked.
      TuneScope tuning([&](const cuda::ConvCall&, const cuda::ConvConfig& config) {
        if (config == others[0]) ECH_FAIL("scripted: out of memory for this candidate's scratch");
        return config == others[1] ? 2.0 : 5.0;
      });
      CHECK(cuda::conv_config_for(call) == others[1]);
    }
    {
      TuneScope tuning([&](const cuda::ConvCall&, const cuda::ConvConfig& config) -> double {
        if (config == heuristic) ECH_FAIL("scripted: the heuristic's scratch does not fit");
        return 1.0;
      });
      CHECK_THROWS_WITH_AS(cuda::conv_config_for(call),
                           doctest::Contains("the heuristic's scratch does not fit"), Error);
      CHECK(cuda::conv_tune_picks().empty());  // nothing cached
    }
  }

  TEST_CASE("CUDA-event timing: every pass tuned on its own buffers, the pick's result last") {
    // No script: each candidate runs on the call's output (a warm-up, then timed runs), and the
    // pass then runs the pick, so the outputs must be the twin's whatever ran before.
    TuneScope tuning({});
    PrecisionScope scope(Precision::Fp32);
    const Problem p(geometries()[1], Precision::Fp32);
    const Tensor y = ops::conv2d(p.x, p.w, p.bias, p.g);
    const ops::Conv2dGrads grads = ops::conv2d_backward(p.gy, p.x, p.w, true, true, p.g);
    const std::vector<cuda::ConvTunePick> picks = cuda::conv_tune_picks();
    REQUIRE(picks.size() == 3);
    for (const cuda::ConvTunePick& pick : picks) {
      const std::vector<cuda::ConvConfig> all = cuda::conv_candidates(pick.pass, p.g);
      CHECK(std::find(all.begin(), all.end(), pick.pick_config) != all.end());
      CHECK(pick.candidates == static_cast<int>(all.size()));
      CHECK(pick.tuned_ms > 0);
      CHECK(pick.tuned_ms <= pick.heuristic_ms);
    }
    const auto near = [](const Tensor& got, const Tensor& want, parity::Tolerance tol,
                         const char* what) {
      const parity::Comparison cmp = parity::compare(got.cpu(), want, tol);
      CHECK_MESSAGE(cmp.ok, what, ": ", cmp.summary());
    };
    near(y, p.y, {1e-4, 1e-4}, "forward");
    near(grads.input, p.grad_input, {1e-4, 1e-4}, "grad input");
    near(grads.weight, p.grad_weight, {5e-4, 1e-4}, "grad weight");
  }

  TEST_CASE(
      "during stream capture the tuner uses the cached pick, else the heuristic, never times") {
    int calls = 0;
    TuneScope tuning([&](const cuda::ConvCall&, const cuda::ConvConfig& config) {
      ++calls;
      return config.im2col ? 1.0 : 2.0;
    });
    const Problem p(geometries()[1], Precision::Fp32);
    Tensor out = Tensor::full(p.y.shape(), std::nanf(""), kFloat32, Device::cuda(0));
    cuda::ConvCall forward = p.call(cuda::ConvPass::Forward, out);
    REQUIRE(cuda::conv_config_for(forward).im2col);  // tuned eagerly: cached
    const int eager_calls = calls;
    cuda::ConvCall weight = p.call(cuda::ConvPass::BackwardWeight, out);  // not tuned yet
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
    forward.stream = weight.stream = stream;
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const cuda::ConvConfig cached = cuda::conv_config_for(forward);
    const cuda::ConvConfig untuned = cuda::conv_config_for(weight);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);  // nothing invalidated it
    if (graph) cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
    CHECK(cached.im2col);
    CHECK(untuned == cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, p.g));
    CHECK(calls == eager_calls);
    CHECK(cuda::conv_tune_picks().size() == 1);
  }

  TEST_CASE("tuning off: the heuristic runs, nothing is timed or cached") {
    int calls = 0;
    cuda::set_conv_tune_timer([&](const cuda::ConvCall&, const cuda::ConvConfig&) {
      ++calls;
      return 1.0;
    });
    REQUIRE_FALSE(cuda::conv_autotune());
    for (const Geometry& c : geometries()) {
      const Problem p(c, Precision::Fp32);
      for (const cuda::ConvPass pass : kPasses) {
        Tensor out = Tensor::full(p.want(pass).shape(), std::nanf(""), kFloat32, Device::cuda(0));
        CHECK(cuda::conv_config_for(p.call(pass, out)) == cuda::conv_heuristic(pass, p.g));
      }
      (void)ops::conv2d(p.x, p.w, p.bias, p.g);
    }
    cuda::set_conv_tune_timer({});
    CHECK(calls == 0);
    CHECK(cuda::conv_tune_picks().empty());
    // Today's heuristic, spot checks: the stride-1 3x3 layers with few channels take the window
    // kernel forward and for the input gradient; without it, <= 16 rows take the 16x256 tile with
    // its table (split over 3 groups: one tile, deep in the emulation's terms), the grad input of
    // < 8 channels the columns path; the weight gradient split_k's count.
    const Conv2dGeometry g0 = full_geometry(geometries()[0]), g3 = full_geometry(geometries()[3]);
    CHECK(cuda::conv_heuristic(cuda::ConvPass::Forward, g0).window);
    CHECK(cuda::conv_heuristic(cuda::ConvPass::BackwardData, g3).window);
    const bool window = cuda::conv_window();
    cuda::set_conv_window(false);
    const cuda::ConvConfig fwd = cuda::conv_heuristic(cuda::ConvPass::Forward, g0);
    CHECK((!fwd.im2col && fwd.tile == cuda::ConvTile::Tiny && fwd.table && fwd.groups == 3));
    CHECK(cuda::conv_heuristic(cuda::ConvPass::BackwardData, g3).im2col);
    CHECK_FALSE(cuda::conv_heuristic(cuda::ConvPass::Forward, g3).im2col);
    cuda::set_conv_window(window);
    CHECK(cuda::conv_heuristic(cuda::ConvPass::BackwardWeight, g0).groups ==
          cuda::conv_wgrad_groups(g0));
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::Im2colGemm);
    CHECK(cuda::conv_heuristic(cuda::ConvPass::Forward, g0).im2col);
    CHECK(cuda::conv_candidates(cuda::ConvPass::Forward, g0).size() == 1);
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  }
}
