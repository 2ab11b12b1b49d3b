// The A/B rows of exp_gpu_kernels (bench/exp_gpu_kernels.cpp): each of our kernels' switches
// (gather table, FMA core, tensor-core tile, ring depth, cp.async of k-contiguous operands, the
// autotuner, the direct weight gradient, the strided input gradient by phases, the window
// kernel) timed off then on in the same run, and the weight gradient's split-K sweep.
#if ECHELON_WITH_CUDA
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gpu_kernels_common.h"

#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_phases.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>

using namespace echelon;

namespace gpu_kernels {

namespace {

// Every direction of the implicit GEMM per call under the two settings of one switch (set(false)
// then set(true)) in the same run; `title` names the two columns. Layers whose passes do not reach
// the switched kernel time the same kernel twice. The window kernel is off meanwhile (it would
// take the forward and input gradient of the layers it fits: window_rows times it).
template <typename Set>
void ab_rows(const std::vector<ConvShape>& shapes, Precision precision, const char* title,
             Set set) {
  const bool window = cuda::conv_window();
  cuda::set_conv_window(false);
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  ops::set_float32_precision(precision);
  std::printf("== %s (%s, implicit GEMM; us per call; ratio > 1: the second faster)\n", title,
              name(precision));
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry g = s.window();
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11),
                 bias = random_cuda({s.w[0]}, 12);
    const Tensor gy = random_cuda(ops::conv2d(x, w, bias, g).shape(), 13);
    double t[2][3];  // [first, second][fwd, bwd-data, bwd-weight]
    for (const bool second : {false, true}) {
      set(second);
      t[second][0] = per_call_ms([&] { ops::conv2d(x, w, bias, g); }).ms;
      t[second][1] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, true, g, false); }).ms;
      t[second][2] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, false, g, true); }).ms;
    }
    std::printf("%s", s.label().c_str());
    const char* directions[3] = {"fwd", "bwd-data", "bwd-weight"};
    for (int d = 0; d < 3; ++d)
      std::printf("  %s %8.1f / %8.1f (%.2f)", directions[d], t[0][d] * 1e3, t[1][d] * 1e3,
                  t[0][d] / t[1][d]);
    std::printf("\n");
  }
  ops::set_float32_precision(Precision::Fp32);
  cuda::set_conv_window(window);
}

}  // namespace

// The weight gradient's split-K, swept (fp32, implicit GEMM): per shape, the per-call time at
// group counts 1, 2, 4, ... up to the largest the launcher allows, and the heuristic's pick
// (cuda::set_conv_wgrad_split; the default restored after). A GPU tuning run, no peer.
void wgrad_sweep_rows(const std::vector<ConvShape>& shapes) {
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  std::printf("== weight-gradient split-K sweep (fp32, implicit GEMM; us per call at G groups)\n");
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry g = s.window(), full = s.full();
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11);
    const Tensor gy = random_cuda(ops::conv2d(x, w, Tensor(), g).shape(), 13);
    const int64_t picked = cuda::conv_wgrad_groups(full);
    std::printf("%s  heuristic G=%lld:", s.label().c_str(), static_cast<long long>(picked));
    int64_t last = 0;
    for (int64_t groups = 1; groups <= 4096; groups *= 2) {
      cuda::set_conv_wgrad_split(0, groups);
      const int64_t actual = cuda::conv_wgrad_groups(full);
      if (actual == last) break;  // clamped: the launcher allows no more
      last = actual;
      const PerCall t = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, false, g, true); });
      std::printf(" G=%lld %.1f", static_cast<long long>(actual), t.ms * 1e3);
    }
    cuda::set_conv_wgrad_split(0, 0);
    std::printf("\n");
  }
}

// The forward (with the bias) and the input gradient of the layers the window kernel takes
// (cuda/kernels/conv_window.h), fp32, per call through cuda::run_conv: the heuristic's choice with
// the window kernel off (implicit GEMM, phases or the columns path), then the window kernel. Above
// 64 channels of the pass the window kernel is only an autotuner candidate: these rows say
// whether it should be more.
void window_rows(const std::vector<ConvShape>& shapes) {
  const bool window = cuda::conv_window();  // false under ECHELON_CONV_WINDOW=0
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  ops::set_float32_precision(Precision::Fp32);
  std::printf(
      "== forward and input gradient: GEMM / window (fp32; us per call; ratio > 1: window "
      "faster)\n");
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry full = s.full();
    const cuda::ConvPass passes[2] = {cuda::ConvPass::Forward, cuda::ConvPass::BackwardData};
    const bool fits[2] = {cuda::conv_window_fits(passes[0], full),
                          cuda::conv_window_fits(passes[1], full)};
    if (!fits[0] && !fits[1]) continue;
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11),
                 bias = random_cuda({s.w[0]}, 12);
    const Tensor gy = random_cuda({full.n, full.o, full.out_h, full.out_w}, 13);
    Tensor y = Tensor::empty(gy.shape(), kFloat32, Device::cuda(0));
    Tensor gx = Tensor::empty(s.x, kFloat32, Device::cuda(0));
    double t[2][2] = {};  // [GEMM, window][fwd, bwd-data]
    for (int d = 0; d < 2; ++d) {
      if (!fits[d]) continue;
      cuda::ConvCall call;
      call.pass = passes[d], call.geometry = full, call.stream = cuda::current_stream(0);
      call.x = x.data<float>(), call.w = w.data<float>(), call.grad_out = gy.data<float>();
      call.bias = d == 0 ? bias.data<float>() : nullptr;
      call.out = d == 0 ? y.data<float>() : gx.data<float>();
      cuda::set_conv_window(false);
      const cuda::ConvConfig gemm = cuda::conv_heuristic(passes[d], full);
      t[0][d] = per_call_ms([&] { cuda::run_conv(call, gemm); }).ms;
      t[1][d] = per_call_ms([&] { cuda::run_conv(call, cuda::ConvConfig{.window = true}); }).ms;
    }
    std::printf("%s", s.label().c_str());
    const char* directions[2] = {"fwd", "bwd-data"};
    for (int d = 0; d < 2; ++d)
      if (fits[d])
        std::printf("  %s %8.1f / %8.1f (%.2f)", directions[d], t[0][d] * 1e3, t[1][d] * 1e3,
                    t[0][d] / t[1][d]);
    std::printf("\n");
  }
  cuda::set_conv_window(window);
}

void plan_rows(const std::vector<ConvShape>& shapes) {
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  const cuda::ConvPass passes[3] = {cuda::ConvPass::Forward, cuda::ConvPass::BackwardData,
                                    cuda::ConvPass::BackwardWeight};
  for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16}) {
    ops::set_float32_precision(precision);
    std::printf("== the heuristic's kernels per layer and pass (%s; host only)\n", name(precision));
    for (const ConvShape& s : shapes) {
      std::printf("%s", s.label().c_str());
      const char* directions[3] = {"fwd", "bwd-data", "bwd-w"};
      for (int d = 0; d < 3; ++d)
        std::printf("%s %s: %s", d == 0 ? " " : " |", directions[d],
                    cuda::to_string(cuda::conv_heuristic(passes[d], s.full())).c_str());
      std::printf("\n");
    }
  }
  ops::set_float32_precision(Precision::Fp32);
}

void direct_bank_rows(const std::vector<ConvShape>& shapes) {
  std::printf(
      "== direct weight gradient: shared-memory wavefronts of an x load, dense / padded band "
      "(modelled, 1: no bank conflict)\n");
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry full = s.full();
    if (!cuda::wgrad_direct_fits(full)) continue;
    std::printf("%s  %5.2f / %5.2f\n", s.label().c_str(),
                cuda::wgrad_direct_x_load_wavefronts(full, false),
                cuda::wgrad_direct_x_load_wavefronts(full));
  }
}

// The weight gradient of the layers the direct kernel takes (cuda/kernels/conv_direct.h): the
// implicit GEMM's split-K (cuda::set_conv_wgrad_direct(false)), then the direct reduction (the
// default), per call, under `precision`; the other layers are skipped.
void wgrad_direct_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  const bool direct = cuda::conv_wgrad_direct();  // false under ECHELON_CONV_WGRAD_DIRECT=0
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  ops::set_float32_precision(precision);
  std::printf(
      "== weight gradient: implicit GEMM / direct (%s; us per call; ratio > 1: direct "
      "faster)\n",
      name(precision));
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry g = s.window(), full = s.full();
    if (!cuda::wgrad_direct_fits(full)) continue;
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11);
    const Tensor gy = random_cuda(ops::conv2d(x, w, Tensor(), g).shape(), 13);
    double t[2];
    for (const bool on : {false, true}) {
      cuda::set_conv_wgrad_direct(on);
      t[on] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, false, g, true); }).ms;
    }
    std::printf(
        "%s  GEMM (%s) %8.1f / direct (%lld blocks) %8.1f (%.2f)\n", s.label().c_str(),
        cuda::to_string(cuda::conv_gemm_heuristic(cuda::ConvPass::BackwardWeight, full)).c_str(),
        t[0] * 1e3, static_cast<long long>(cuda::wgrad_direct_groups(full)), t[1] * 1e3,
        t[0] / t[1]);
    if (!cuda::wgrad_direct_sums_bias(full)) continue;  // fp32 only
    // With the bias gradient: the direct kernel's own sums, against the weight gradient and then
    // conv.cu's two bias kernels (what ran before session 35).
    const double separate = per_call_ms([&] {
                              ops::conv2d_backward(gy, x, w, false, false, g, true);
                              ops::conv2d_backward(gy, x, w, true, false, g, false);
                            }).ms,
                 fused =
                     per_call_ms([&] { ops::conv2d_backward(gy, x, w, true, false, g, true); }).ms;
    std::printf(
        "%-8s C=%-4lld O=%-4lld + bias: weight, then bias kernels %8.1f / direct with the bias "
        "%8.1f (%.2f)\n",
        s.net, static_cast<long long>(s.x[1]), static_cast<long long>(s.w[0]), separate * 1e3,
        fused * 1e3, separate / fused);
  }
  cuda::set_conv_wgrad_direct(direct);
  ops::set_float32_precision(Precision::Fp32);
}

// The input gradient of the strided layers (ResNet-20's two): the single implicit GEMM
// (cuda::set_conv_dgrad_phases(false)), then one GEMM per phase (cuda/kernels/conv_phases.h), per
// call, under `precision`, the window kernel off (by default it takes these layers: window_rows
// times it against the phases).
void dgrad_phases_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  const bool phases = cuda::conv_dgrad_phases();  // false under ECHELON_CONV_DGRAD_PHASES=0
  const bool window = cuda::conv_window();        // off meanwhile: it takes these layers first
  cuda::set_conv_window(false);
  ops::set_conv_impl(ops::ConvImpl::Ours);
  cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
  ops::set_float32_precision(precision);
  std::printf(
      "== strided input gradient: single GEMM / phases (%s; us per call; ratio > 1: phases "
      "faster)\n",
      name(precision));
  for (const ConvShape& s : shapes) {
    if (s.stride == 1) continue;
    const Conv2dGeometry g = s.window();
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11);
    const Tensor gy = random_cuda(ops::conv2d(x, w, Tensor(), g).shape(), 13);
    double t[2];
    for (const bool on : {false, true}) {
      cuda::set_conv_dgrad_phases(on);
      t[on] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, true, g, false); }).ms;
    }
    std::printf("%s  single %8.1f / phases %8.1f (%.2f)\n", s.label().c_str(), t[0] * 1e3,
                t[1] * 1e3, t[0] / t[1]);
  }
  cuda::set_conv_dgrad_phases(phases);
  cuda::set_conv_window(window);
  ops::set_float32_precision(Precision::Fp32);
}

// The gather table (cuda::set_conv_gather_table), off then on: the forward and grad input's table
// on every register-staged tile (the 128x128 ones since session 40), the weight gradient's column
// table. Bit-identical results.
void gather_table_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  const bool table = cuda::conv_gather_table();  // false under ECHELON_CONV_GATHER_TABLE=0
  ab_rows(shapes, precision, "gather table off / on",
          [](bool second) { cuda::set_conv_gather_table(second); });
  cuda::set_conv_gather_table(table);
}

// The 128x128 fp32 tile's FMA cores (cuda::set_fma_warp_tiles): the previous block-strided one,
// then the warp-tiled one (the default). Bit-identical results.
void fma_core_rows(const std::vector<ConvShape>& shapes) {
  const bool warp_tiles = cuda::fma_warp_tiles();  // false under ECHELON_FMA_CORE=old
  ab_rows(shapes, Precision::Fp32, "FMA core old / new",
          [](bool second) { cuda::set_fma_warp_tiles(second); });
  cuda::set_fma_warp_tiles(warp_tiles);
}

// The tensor-core kernels' tile forced to 64x64, then 128x128 (cuda::set_mma_tile). Layers whose
// GEMMs are below 128 rows or columns run the 64x64 kernel in both columns.
void mma_tile_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  const cuda::MmaTile mode = cuda::mma_tile();
  ab_rows(shapes, precision, "tensor-core tile 64x64 / 128x128", [](bool second) {
    cuda::set_mma_tile(second ? cuda::MmaTile::Large : cuda::MmaTile::Small);
  });
  cuda::set_mma_tile(mode);
}

// The TF32 SGEMM's 128x128 ring (cuda::set_mma_stages): 2 stages (static shared memory), then
// mma_deep_stages() (dynamic), with the 128x128 tile forced (cuda::set_mma_tile(Large)). Square
// NN at every size (B by cp.async, A by float4 registers), TN (both by cp.async) and NN ld+1 (no
// cp.async: the ring should change nothing) at the middle one. bf16 and the convolutions have no
// deep ring (no cp.async operands: mma_tile.cuh), so TF32 SGEMM only.
void mma_stages_gemm_rows(const std::vector<int64_t>& sizes) {
  ops::set_float32_precision(Precision::Tf32);
  ops::set_matmul_impl(ops::MatmulImpl::Ours);
  const cuda::MmaTile mode = cuda::mma_tile();
  const int stages = cuda::mma_stages();  // 4 under ECHELON_MMA_STAGES=4
  cuda::set_mma_tile(cuda::MmaTile::Large);
  std::printf(
      "== SGEMM TF32 128x128 ring: 2 / %d stages (TFLOP/s; ratio > 1: the deep ring "
      "faster)\n",
      cuda::mma_deep_stages());
  const auto measure = [&](const char* layout, int64_t s, const Tensor& a, const Tensor& b,
                           bool trans_a) {
    double t[2];
    for (const bool deep : {false, true}) {
      cuda::set_mma_stages(deep ? cuda::mma_deep_stages() : 2);
      t[deep] = median_ms([&] { ops::matmul(a, b, trans_a, false); });
    }
    const double tflop = 2.0 * s * s * s / 1e12;
    std::printf("sgemm tf32 %5lld^3 %-9s: 2 stages %7.2f, %d stages %7.2f TFLOP/s (%.2f)\n",
                static_cast<long long>(s), layout, tflop / (t[0] / 1e3), cuda::mma_deep_stages(),
                tflop / (t[1] / 1e3), t[0] / t[1]);
  };
  for_each_gemm_problem(sizes, measure);
  cuda::set_mma_stages(stages);
  cuda::set_mma_tile(mode);
  ops::set_matmul_impl(ops::MatmulImpl::Auto);
  ops::set_float32_precision(Precision::Fp32);
}

// The TF32 128x128 tile's k-contiguous aligned operands (cuda::set_mma_async_k): by float4
// registers one slice ahead, then by cp.async into [m][k] / [n][k] rows (the async-K tiles),
// with the 128x128 tile forced. NN (A k-contiguous; B by cp.async either way) at every size with
// the deep ring (where cp.async depth can matter), and at the middle size NN and NT (both
// operands k-contiguous) at 2 stages, NT at the deep ring: 6 rows of 2 timings.
void mma_async_k_gemm_rows(const std::vector<int64_t>& sizes) {
  ops::set_float32_precision(Precision::Tf32);
  ops::set_matmul_impl(ops::MatmulImpl::Ours);
  const cuda::MmaTile mode = cuda::mma_tile();
  const int stages = cuda::mma_stages();
  const bool async_k = cuda::mma_async_k();  // true under ECHELON_MMA_ASYNC_K=1
  cuda::set_mma_tile(cuda::MmaTile::Large);
  std::printf(
      "== SGEMM TF32 128x128, k-contiguous operands: float4 registers / cp.async (TFLOP/s; ratio "
      "> 1: cp.async faster)\n");
  const auto measure = [&](const char* layout, int64_t s, bool trans_b, int depth) {
    const Tensor a = random_cuda({s, s}, 8), b = random_cuda({s, s}, 9);
    cuda::set_mma_stages(depth);
    double t[2];
    for (const bool on : {false, true}) {
      cuda::set_mma_async_k(on);
      t[on] = median_ms([&] { ops::matmul(a, b, false, trans_b); });
    }
    const double tflop = 2.0 * s * s * s / 1e12;
    std::printf(
        "sgemm tf32 %5lld^3 %-3s %d stages: registers %7.2f, cp.async %7.2f TFLOP/s (%.2f)\n",
        static_cast<long long>(s), layout, depth, tflop / (t[0] / 1e3), tflop / (t[1] / 1e3),
        t[0] / t[1]);
  };
  for (const int64_t s : sizes) measure("nn", s, false, cuda::mma_deep_stages());
  const int64_t s = sizes[sizes.size() / 2];
  measure("nn", s, false, 2);
  measure("nt", s, true, 2);
  measure("nt", s, true, cuda::mma_deep_stages());
  cuda::set_mma_async_k(async_k);
  cuda::set_mma_stages(stages);
  cuda::set_mma_tile(mode);
  ops::set_matmul_impl(ops::MatmulImpl::Auto);
  ops::set_float32_precision(Precision::Fp32);
}

// The same switch in the TF32 convolutions (the heuristic follows cuda::mma_async_k on the
// 128x128 tile: forward weights and weight-gradient grad_out by cp.async), at 2 stages and at the
// deep ring. Layers on smaller tiles, and every grad input, run the same kernel in both columns.
void conv_async_k_rows(const std::vector<ConvShape>& shapes) {
  const int stages = cuda::mma_stages();
  const bool async_k = cuda::mma_async_k();
  for (const int depth : {2, cuda::mma_deep_stages()}) {
    cuda::set_mma_stages(depth);
    const std::string title =
        "k-contiguous conv operands registers / cp.async, " + std::to_string(depth) + " stages";
    ab_rows(shapes, Precision::Tf32, title.c_str(),
            [](bool second) { cuda::set_mma_async_k(second); });
  }
  cuda::set_mma_async_k(async_k);
  cuda::set_mma_stages(stages);
}

// The TF32 convolutions' gathered operands (cuda::set_conv_async_gather; the heuristic follows
// it on the 128x128 tile, every pass): in registers one slice ahead (today's tile, its weights /
// grad_out by float4 registers: async-K off for both columns), then by 4-byte cp.async in the
// gather tiles (every operand by cp.async), at 2 stages and at the deep ring. The first column
// is the same kernel at both depths; layers on smaller tiles run one kernel in both columns.
void conv_async_gather_rows(const std::vector<ConvShape>& shapes) {
  const int stages = cuda::mma_stages();
  const bool async_k = cuda::mma_async_k(), gather = cuda::conv_async_gather();
  cuda::set_mma_async_k(false);
  for (const int depth : {2, cuda::mma_deep_stages()}) {
    cuda::set_mma_stages(depth);
    const std::string title =
        "conv gathers registers / 4-byte cp.async, " + std::to_string(depth) + " stages";
    ab_rows(shapes, Precision::Tf32, title.c_str(),
            [](bool second) { cuda::set_conv_async_gather(second); });
  }
  cuda::set_conv_async_gather(gather);
  cuda::set_mma_async_k(async_k);
  cuda::set_mma_stages(stages);
}

// The autotuner (cuda::set_conv_autotune): tuning off (the heuristic), then on, per layer and
// pass. With tuning on, per_call_ms's eager warm-up call tunes the shape on the caller's stream;
// the graph capture then runs the pick. Below the A/B rows, the tuner's own table: each layer's
// pick, its eager time and the heuristic's (the fastest of <= 3 event-timed runs each).
void autotune_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  const bool before = cuda::conv_autotune();  // true under ECHELON_AUTOTUNE=1
  cuda::clear_conv_tune_cache();
  ab_rows(shapes, precision, "heuristic / autotuned",
          [](bool second) { cuda::set_conv_autotune(second); });
  cuda::set_conv_autotune(before);
  std::printf("-- the tuner's picks (%s; its eager timings in us: heuristic / tuned (ratio))\n",
              name(precision));
  for (const cuda::ConvTunePick& p : cuda::conv_tune_picks())
    std::printf("%-40s %-11s %9.1f / %9.1f (%.2f)  %-32s heuristic %s, %d candidates\n",
                cuda::describe(p.geometry).c_str(), cuda::name(p.pass), p.heuristic_ms * 1e3,
                p.tuned_ms * 1e3, p.heuristic_ms / p.tuned_ms, p.pick.c_str(), p.heuristic.c_str(),
                p.candidates);
  cuda::clear_conv_tune_cache();
}

}  // namespace gpu_kernels
#endif
