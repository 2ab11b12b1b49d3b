// GPU kernel yardsticks in one run (issue #10, P3), printed as ratios to the peer measured in the
// same process: bandwidth kernels (elementwise, batch norm, pooling, reductions) in GB/s against
// a device-to-device copy, our SGEMM against cuBLAS at 1k-4k, our convolution (forward,
// backward-data, backward-weight; implicit GEMM and im2col + GEMM) against cuDNN on the conv
// shapes of LeNet-5, ResNet-20, AlexNet and VGG-16 (CIFAR-sized inputs, batch 128; fp32, TF32
// and bf16). No Google Benchmark needed, so it builds on
// the GPU machine; tools/gpu-check.sh runs it. Each row is the median of `--repeats` timings
// (CUDA events on the current stream, after one warm-up call); a conv row times a CUDA graph of
// many calls (per_call_ms), so launch latency does not set a floor under small layers.
//   exp_gpu_kernels [--repeats N] [--quick] [--conv-only | --sgemm-only]
//                   [--nets lenet5,resnet20,...] [--conv-calls N] [--table-ab] [--fma-ab]
//                   [--mma-tile-ab] [--mma-stages-ab] [--mma-async-k-ab] [--conv-async-k-ab]
//                   [--conv-async-gather-ab] [--autotune-ab] [--direct-ab] [--phases-ab]
//                   [--window-ab] [--wgrad-sweep] [--direct-banks]
//   (--quick: small shapes, a smoke test; --direct-banks: a host-side model, no GPU needed)
// Without a GPU (or a CUDA build) it says so and exits 0.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <echelon/tensor/ops.h>

#include "bench/driver_args.h"

#if ECHELON_WITH_CUDA
#include "bench/gpu_kernels_common.h"

#include <echelon/cuda/check.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/parallel/cuda_graph.h>
#endif

using namespace echelon;

#if ECHELON_WITH_CUDA
using namespace gpu_kernels;

namespace gpu_kernels {

int g_repeats = 10;
int g_conv_calls = 0;

// Median milliseconds of `body` over g_repeats runs, after a warm-up (allocator, handles,
// cuDNN plan).
double median_ms(const std::function<void()>& body) {
  cudaStream_t stream = cuda::current_stream(0);
  body();
  ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < g_repeats; ++r) {
    cuda::Event start(true), stop(true);
    start.record(stream);
    body();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(start.elapsed_ms(stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void for_each_gemm_problem(const std::vector<int64_t>& sizes, const GemmMeasure& measure) {
  for (const int64_t s : sizes)
    measure("nn", s, random_cuda({s, s}, 8), random_cuda({s, s}, 9), false);
  const int64_t s = sizes[sizes.size() / 2];
  measure("tn", s, random_cuda({s, s}, 8), random_cuda({s, s}, 9), true);
  measure("nn ld+1", s, random_cuda({s, s + 1}, 8).narrow(1, 0, s),
          random_cuda({s, s + 1}, 9).narrow(1, 0, s), false);
}

}  // namespace gpu_kernels

namespace {

double gb_per_s(double bytes, double ms) {
  return bytes / (ms * 1e6);
}

// ---- bandwidth: each op's bytes moved (read + written) over its time, vs a D2D copy ---------

void bandwidth_rows(int64_t n, int64_t image) {
  const Tensor a = random_cuda({n}, 1), b = random_cuda({n}, 2);
  Tensor dst = Tensor::empty({n}, kFloat32, Device::cuda(0));
  const double f = sizeof(float);
  const double copy =
      gb_per_s(2 * n * f, median_ms([&] {
                 ECH_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), a.raw_data(), a.nbytes(),
                                                cudaMemcpyDefault, cuda::current_stream(0)));
               }));
  std::printf("%-44s %10.1f GB/s   1.00 of copy\n", "copy D2D (peer)", copy);
  const auto row = [&](const char* name, double bytes, const std::function<void()>& body) {
    const double bw = gb_per_s(bytes, median_ms(body));
    std::printf("%-44s %10.1f GB/s   %.2f of copy\n", name, bw, bw / copy);
  };
  row("add (contiguous, vector path)", 3 * n * f, [&] { ops::add(a, b); });
  row("relu", 2 * n * f, [&] { ops::relu(a); });
  row("sum over dim 0 of (n/4096, 4096): columns", n * f, [&] {
    ops::sum(a.view({n / 4096, 4096}), {0});
  });
  row("sum over dim 1 of (n/1024, 1024): rows", n * f, [&] {
    ops::sum(a.view({n / 1024, 1024}), {1});
  });
  // The same on views that start one float in: the kernels' float fallbacks (no float4), so the
  // 16-byte paths' gain is read in the same run.
  row("sum over dim 0, misaligned (float lanes)", (n - 4096) * f, [&] {
    ops::sum(a.narrow(0, 1, n - 4096).view({n / 4096 - 1, 4096}), {0});
  });
  row("sum over dim 1, misaligned (float loads)", (n - 1024) * f, [&] {
    ops::sum(a.narrow(0, 1, n - 1024).view({n / 1024 - 1, 1024}), {1});
  });
  // (N, C, H, W) activations: 16 channels (ResNet-20's first stage) of `image`-pixel planes.
  const int64_t c = 16, batch = n / (c * image);
  const Shape nchw = {batch, c, image / 32, 32};
  const Tensor x = a.view(nchw), g = b.view(nchw);
  const Tensor gamma = random_cuda({c}, 3), beta = random_cuda({c}, 4);
  Tensor rm = random_cuda({c}, 5), rv = ops::add(random_cuda({c}, 6), 1.0);
  const auto fwd = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5);
  row("batch_norm_train (16 channels)", 3 * n * f,
      [&] { ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5); });
  row("batch_norm_backward (16 channels)", 4 * n * f,
      [&] { ops::batch_norm_backward(g, x, gamma, fwd.save_mean, fwd.save_invstd); });
  const Tensor x_misaligned = a.narrow(0, 1, n - c * image).view({batch - 1, c, image / 32, 32});
  row("batch_norm_train, misaligned (float walk)", 3 * (n - c * image) * f,
      [&] { ops::batch_norm_train(x_misaligned, gamma, beta, rm, rv, 0.1, 1e-5); });
  Pool2dGeometry pool;  // 2x2 stride 2
  row("max_pool2d 2x2 (argmax kept)", n * f + n / 4 * (f + 8), [&] {
    Tensor argmax;
    ops::max_pool2d(x, pool, &argmax);
  });
  // The fused layer pairs (ops::set_fused_ops) against the same ops one after another.
  const auto fused_row = [&](const char* name, double bytes, const std::function<void()>& fused,
                             const std::function<void()>& composed) {
    const double fused_ms = median_ms(fused), composed_ms = median_ms(composed);
    std::printf("%-44s %10.1f GB/s   %.2f of copy, %.2fx the composition\n", name,
                gb_per_s(bytes, fused_ms), gb_per_s(bytes, fused_ms) / copy,
                composed_ms / fused_ms);
  };
  fused_row(
      "batch_norm_train + ReLU, fused", 3 * n * f,
      [&] { ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, /*relu=*/true); },
      [&] { ops::relu(ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5).out); });
  fused_row(
      "batch_norm_train + residual + ReLU, fused", 4 * n * f,
      [&] { ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true, g); },
      [&] {
        ops::relu(ops::add(ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5).out, g));
      });
  const auto relu_fwd = ops::batch_norm_train(x, gamma, beta, rm, rv, 0.1, 1e-5, true, g);
  fused_row(
      "batch_norm_backward + ReLU (+ masked), fused", 6 * n * f,
      [&] {
        ops::batch_norm_backward(g, x, gamma, relu_fwd.save_mean, relu_fwd.save_invstd,
                                 relu_fwd.out, /*want_masked=*/true);
      },
      [&] {
        const Tensor masked = ops::unary_backward(UnaryOp::Relu, g, relu_fwd.out, relu_fwd.out);
        ops::batch_norm_backward(masked, x, gamma, relu_fwd.save_mean, relu_fwd.save_invstd);
      });
  // BN + ReLU without a residual (no masked output asked for): bytes of the ideal fused pass
  // (reads dy, relu_out, x; writes grad_in); ours moves 7n (norm.cu), the composition 8n.
  fused_row(
      "batch_norm_backward + ReLU, fused", 4 * n * f,
      [&] {
        ops::batch_norm_backward(g, x, gamma, relu_fwd.save_mean, relu_fwd.save_invstd,
                                 relu_fwd.out, /*want_masked=*/false);
      },
      [&] {
        const Tensor masked = ops::unary_backward(UnaryOp::Relu, g, relu_fwd.out, relu_fwd.out);
        ops::batch_norm_backward(masked, x, gamma, relu_fwd.save_mean, relu_fwd.save_invstd);
      });
  fused_row(
      "max_pool2d(ReLU) 2x2, fused", n * f + n / 4 * (f + 8),
      [&] {
        Tensor argmax;
        ops::max_pool2d(x, pool, &argmax, /*relu_first=*/true);
      },
      [&] {
        Tensor argmax;
        ops::max_pool2d(ops::relu(x), pool, &argmax);
      });
  // The max pooling's backward as the autograd nodes run it, given the window: a gather over the
  // covering windows, every pixel written once. Its "composition" here is the geometry-less
  // scatter (a memset, then atomics through argmax); with relu_max_pool2d's mask in the same
  // pass, the ReLU's backward and then the scatter.
  Tensor pool_argmax;
  const Tensor pooled = ops::max_pool2d(x, pool, &pool_argmax, /*relu_first=*/true);
  const Tensor g_pooled = random_cuda(pooled.shape(), 10);
  fused_row(
      "max_pool2d backward 2x2, gather", n * f + n / 4 * (f + 8),
      [&] { ops::max_pool2d_backward(g_pooled, pool_argmax, x.shape(), pool); },
      [&] { ops::max_pool2d_backward(g_pooled, pool_argmax, x.shape()); });
  fused_row(
      "max_pool2d(ReLU) backward 2x2, mask fused", n * f + n / 4 * (2 * f + 8),
      [&] { ops::max_pool2d_backward(g_pooled, pool_argmax, x.shape(), pool, pooled); },
      [&] {
        const Tensor masked = ops::unary_backward(UnaryOp::Relu, g_pooled, pooled, pooled);
        ops::max_pool2d_backward(masked, pool_argmax, x.shape());
      });
  Conv2dGeometry one;  // conv bias gradient: a per-channel reduction over (N, H, W)
  const Tensor w1 = random_cuda({c, c, 1, 1}, 7);
  row("conv bias gradient (16 channels)", n * f,
      [&] { ops::conv2d_backward(g, x, w1, true, false, one, false); });
  // Convolution + bias + ReLU (conv2d_relu): the clamp in the implicit GEMM's store against a
  // ReLU pass after; the backward's mask in the bias gradient's pass against the ReLU's backward
  // then the bias gradient (the GEMMs, the same either way, left out: need_input/weight false).
  Conv2dGeometry same;
  same.kernel_h = same.kernel_w = 3, same.pad_h = same.pad_w = 1;
  const Tensor w3 = random_cuda({c, c, 3, 3}, 8), b3 = random_cuda({c}, 9);
  fused_row(
      "conv2d 3x3 16->16 + bias + ReLU, fused", 2 * n * f,
      [&] { ops::conv2d(x, w3, b3, same, /*relu=*/true); },
      [&] { ops::relu(ops::conv2d(x, w3, b3, same)); });
  const Tensor y_relu = ops::relu(x);  // a saved ReLU output of x's shape (1x1 conv: y's too)
  fused_row(
      "conv ReLU mask + bias gradient, fused", 3 * n * f,
      [&] { ops::conv2d_backward(g, x, w1, true, false, one, false, Tensor(), y_relu); },
      [&] {
        const Tensor masked = ops::unary_backward(UnaryOp::Relu, g, y_relu, y_relu);
        ops::conv2d_backward(masked, x, w1, true, false, one, false);
      });
}

// ---- SGEMM: ours vs cuBLAS ----------------------------------------------------------------------

// `precision`: fp32 (our FMA kernel vs cuBLAS's default math), tf32 (our WMMA kernel vs cuBLAS
// with TF32 tensor-op math) or bf16 (our bf16 WMMA kernel vs cuBLAS with
// CUBLAS_COMPUTE_32F_FAST_16BF; fp32 matrices either way). Square NN products at every size
// (A by float4 loads, B by cp.async; bf16: both float4); at the middle size also TN (both by
// cp.async; bf16: float4) and NN with rows of s + 1 floats (misaligned: element loads, the
// staging before cp.async), so the 16-byte paths' gain is read in the same run. fp32 also
// times the 128x128 tile's previous FMA core (cuda::set_fma_warp_tiles(false): "old core").
// Under TF32 and bf16 the row also times ours with the 64x64 and with the 128x128 tensor-core
// tile forced (cuda::set_mma_tile): old vs new in one run; "ours" is the mode the process
// started with (ECHELON_MMA_TILE, default Auto).
void gemm_rows(const std::vector<int64_t>& sizes, Precision precision) {
  ops::set_float32_precision(precision);
  const bool tile_ab = precision != Precision::Fp32;
  const auto measure = [&](const char* layout, int64_t s, const Tensor& a, const Tensor& b,
                           bool trans_a) {
    ops::set_matmul_impl(ops::MatmulImpl::Blas);
    const double blas = median_ms([&] { ops::matmul(a, b, trans_a, false); });
    ops::set_matmul_impl(ops::MatmulImpl::Ours);
    const double ours = median_ms([&] { ops::matmul(a, b, trans_a, false); });
    double old_core = 0.0;
    if (precision == Precision::Fp32) {
      const bool warp_tiles = cuda::fma_warp_tiles();  // false under ECHELON_FMA_CORE=old
      cuda::set_fma_warp_tiles(false);
      old_core = median_ms([&] { ops::matmul(a, b, trans_a, false); });
      cuda::set_fma_warp_tiles(warp_tiles);
    }
    double forced[2] = {0.0, 0.0};  // 64x64, 128x128
    if (tile_ab) {
      const cuda::MmaTile mode = cuda::mma_tile();
      for (const cuda::MmaTile tile : {cuda::MmaTile::Small, cuda::MmaTile::Large}) {
        cuda::set_mma_tile(tile);
        forced[tile == cuda::MmaTile::Large] =
            median_ms([&] { ops::matmul(a, b, trans_a, false); });
      }
      cuda::set_mma_tile(mode);
    }
    ops::set_matmul_impl(ops::MatmulImpl::Auto);
    const double tflop = 2.0 * s * s * s / 1e12;
    std::printf("sgemm %s %5lld^3 %-9s: ours %7.2f TFLOP/s  cuBLAS %7.2f TFLOP/s  ours/cuBLAS %.2f",
                name(precision), static_cast<long long>(s), layout, tflop / (ours / 1e3),
                tflop / (blas / 1e3), blas / ours);
    if (precision == Precision::Fp32)
      std::printf("  old core %7.2f TFLOP/s (old/new time %.2f)", tflop / (old_core / 1e3),
                  old_core / ours);
    if (tile_ab)
      std::printf("  | tile 64x64 %7.2f, 128x128 %7.2f TFLOP/s (%.2f)", tflop / (forced[0] / 1e3),
                  tflop / (forced[1] / 1e3), forced[0] / forced[1]);
    std::printf("\n");
  };
  for_each_gemm_problem(sizes, measure);
  ops::set_float32_precision(Precision::Fp32);
}

// ---- convolution: ours (implicit GEMM, im2col + GEMM) vs cuDNN, each direction ---------------

// Conv timing: `calls` back-to-back calls of one op captured as a CUDA graph (the training
// step's machinery, parallel/cuda_graph.h), the graph replayed g_repeats times between two
// events each: per-call time = the median replay / calls. A single call between two events (the
// old rows) measured the host's launch latency as well: every small layer, cuDNN's too, sat on a
// ~0.1 ms floor. calls is sized so a replay lasts about kConvReplayMs (g_conv_calls > 0 fixes
// it). Should a capture fail, the same calls run eagerly back to back between the two events
// (the row says which: 'g' graph, 'e' eager).
constexpr double kConvReplayMs = 2.0;

}  // namespace

namespace gpu_kernels {

PerCall per_call_ms(const std::function<void()>& body) {
  const cudaStream_t caller = cuda::current_stream(0);
  body();  // warm-up: allocator, handles, cuDNN plan
  cuda::Event start(true), stop(true);
  int calls = g_conv_calls;
  if (calls == 0) {  // from a first estimate, host overhead included (so calls err low)
    start.record(caller);
    for (int i = 0; i < 4; ++i) body();
    stop.record(caller);
    stop.synchronize();
    const double estimate = std::max(start.elapsed_ms(stop) / 4.0, 1e-3);
    calls = std::clamp(static_cast<int>(kConvReplayMs / estimate), 4, 64);
  }
  std::vector<double> ms;
  parallel::CudaGraphStep graph(Device::cuda(0));
  bool captured = false;
  graph.enter(caller);
  {
    const cuda::StreamGuard on_graph(graph.stream(), 0);
    try {
      graph.capture([&] {
        for (int i = 0; i < calls; ++i) body();
      });
      captured = true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "exp_gpu_kernels: conv: capture failed, timing eagerly: %s\n", e.what());
    }
    const cudaStream_t s = graph.stream();
    const auto queue = [&] {
      if (captured)
        graph.replay();
      else
        for (int i = 0; i < calls; ++i) body();
    };
    queue();  // warm-up replay
    for (int r = 0; r < g_repeats; ++r) {
      start.record(s);
      queue();
      stop.record(s);
      stop.synchronize();
      ms.push_back(start.elapsed_ms(stop) / calls);
    }
  }
  graph.leave(caller);
  ECH_CUDA_CHECK(cudaStreamSynchronize(caller));
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], calls, captured};
}

}  // namespace gpu_kernels

namespace {

// One row per shape and direction (s: stride, n: the net's layers of that shape): microseconds
// per call of our implicit GEMM (the default), our im2col + GEMM, cuDNN (when built with it) with
// its heuristic's algorithm and with the fastest of its algorithms ("cuDNN bm": timed first, as
// PyTorch's cudnn.benchmark does), the TFLOP/s of implicit and cuDNN (2*N*O*OH*OW*C*KH*KW each
// direction), and the time ratios implicit/cuDNN, implicit/cuDNN bm and implicit/im2col (> 1:
// implicit slower); last, the calls per replay of each column and g (graph) or e (eager).
// tools/gpu-check.sh's conv_vs_cudnn rows read these columns by position.
void conv_rows(const std::vector<ConvShape>& shapes, Precision precision) {
  struct Impl {
    const char* name;
    ops::ConvImpl impl;
    cuda::ConvAlgorithm algorithm;
    bool tuned;  // cuDNN's benchmark policy (ops::set_conv_autotune); ours keep the caller's
  };
  const bool autotune = ops::conv_autotune();  // ECHELON_AUTOTUNE=1 tunes our columns
  std::vector<Impl> impls = {
      {"implicit", ops::ConvImpl::Ours, cuda::ConvAlgorithm::ImplicitGemm, false},
      {"im2col", ops::ConvImpl::Ours, cuda::ConvAlgorithm::Im2colGemm, false}};
#if ECHELON_WITH_CUDNN
  impls.push_back({"cuDNN", ops::ConvImpl::Cudnn, cuda::ConvAlgorithm::ImplicitGemm, false});
  impls.push_back({"cuDNN bm", ops::ConvImpl::Cudnn, cuda::ConvAlgorithm::ImplicitGemm, true});
#endif
  ops::set_float32_precision(precision);
  std::printf(
      "%-8s %-16s %-12s %2s %2s %-8s %9s %9s %9s %9s %9s %10s %10s %9s %11s  %s   (%s; us per "
      "call)\n",
      "net", "x", "w", "s", "n", "dir", "implicit", "im2col", "cuDNN", "cuDNN bm", "impl TF/s",
      "cuDNN TF/s", "impl/cuDNN", "impl/bm", "impl/im2col", "calls", name(precision));
  const auto dims = [](const Shape& sh) {
    std::string out;
    for (const int64_t d : sh) out += (out.empty() ? "" : "x") + std::to_string(d);
    return out;
  };
  const char* directions[] = {"fwd", "bwd-data", "bwd-w"};
  for (const ConvShape& s : shapes) {
    const Conv2dGeometry g = s.window();
    const Tensor x = random_cuda(s.x, 10), w = random_cuda(s.w, 11);
    const Tensor bias = random_cuda({s.w[0]}, 12);
    const Tensor gy = random_cuda(ops::conv2d(x, w, bias, g).shape(), 13);
    // (N, O, OH, OW) x C*KH*KW multiply-adds, the same in each direction
    const double flop = 2.0 * static_cast<double>(gy.numel()) * s.w[1] * s.w[2] * s.w[3];
    PerCall t[4][3] = {};  // [impl][direction]
    for (size_t i = 0; i < impls.size(); ++i) {
      ops::set_conv_impl(impls[i].impl);
      cuda::set_conv_algorithm(impls[i].algorithm);
      ops::set_conv_autotune(impls[i].impl == ops::ConvImpl::Cudnn ? impls[i].tuned : autotune);
      t[i][0] = per_call_ms([&] { ops::conv2d(x, w, bias, g); });
      t[i][1] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, true, g, false); });
      t[i][2] = per_call_ms([&] { ops::conv2d_backward(gy, x, w, false, false, g, true); });
    }
    ops::set_conv_impl(ops::ConvImpl::Ours);
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
    ops::set_conv_autotune(autotune);
    const auto tflops = [&](const PerCall& p) { return flop / (p.ms * 1e9); };
    for (int d = 0; d < 3; ++d) {
      const bool cudnn = impls.size() == 4;
      std::printf("%-8s %-16s %-12s %2lld %2d %-8s %9.1f %9.1f ", s.net, dims(s.x).c_str(),
                  dims(s.w).c_str(), static_cast<long long>(s.stride), s.count, directions[d],
                  t[0][d].ms * 1e3, t[1][d].ms * 1e3);
      if (cudnn)
        std::printf("%9.1f %9.1f %9.2f %10.2f %10.2f %9.2f ", t[2][d].ms * 1e3, t[3][d].ms * 1e3,
                    tflops(t[0][d]), tflops(t[2][d]), t[0][d].ms / t[2][d].ms,
                    t[0][d].ms / t[3][d].ms);
      else
        std::printf("%9s %9s %9.2f %10s %10s %9s ", "-", "-", tflops(t[0][d]), "-", "-", "-");
      std::printf("%11.2f  ", t[0][d].ms / t[1][d].ms);
      for (size_t i = 0; i < impls.size(); ++i)
        std::printf("%s%d%c", i ? "/" : "", t[i][d].calls, t[i][d].graph ? 'g' : 'e');
      std::printf("\n");
    }
  }
  ops::set_float32_precision(Precision::Fp32);
}

}  // namespace
#endif

int main(int argc, char** argv) {
  // A row reaches the log when printed: gpu-check's time box kills this process, and what it
  // printed before must survive (a pipe or file is otherwise block-buffered).
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool quick = false, conv_only = false, sgemm_only = false, ab_only = false, wgrad_sweep = false,
       table_ab = false, fma_ab = false, tile_ab = false, stages_ab = false, autotune_ab = false,
       async_k_ab = false, conv_async_k_ab = false, conv_async_gather_ab = false, direct_ab = false,
       phases_ab = false, window_ab = false, direct_banks = false, plans = false;
  int repeats = 10, conv_calls = 0;
  CLI::App app{"GPU kernels: bandwidth vs a D2D copy, SGEMM vs cuBLAS, conv vs cuDNN (ratios)",
               "exp_gpu_kernels"};
  app.option_defaults()->always_capture_default();
  app.add_option("--repeats", repeats, "Timings per row, the median is kept")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--quick", quick, "Small shapes: a smoke test, not a measurement");
  app.add_flag("--conv-only", conv_only, "Only the convolution rows");
  app.add_flag("--sgemm-only", sgemm_only, "Only the SGEMM rows");
  app.add_flag("--ab-only", ab_only,
               "Only the A/B rows asked for (the --*-ab flags, --wgrad-sweep): no bandwidth, "
               "SGEMM or convolution table");
  app.add_option("--conv-calls", conv_calls,
                 "Conv calls per timed graph replay; 0: sized to ~2 ms a replay (--quick: 2)")
      ->check(CLI::Range(0, 1000));
  std::vector<std::string> nets;
  app.add_option("--nets", nets, "Conv rows of these networks only (default: all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"lenet5", "resnet20", "alexnet", "vgg16"}));
  app.add_flag("--table-ab", table_ab, "Also time the conv gather table on vs off (fp32 and TF32)");
  app.add_flag("--fma-ab", fma_ab,
               "Also time the 128x128 tile's FMA cores, warp-tiled vs the old one (fp32 conv)");
  app.add_flag("--mma-tile-ab", tile_ab,
               "Also time the tensor-core 128x128 tile vs the 64x64 one (TF32 and bf16 convs)");
  app.add_flag("--mma-stages-ab", stages_ab,
               "Also time the TF32 SGEMM's 128x128 ring at 2 vs 4 stages (cp.async depth)");
  app.add_flag("--mma-async-k-ab", async_k_ab,
               "Also time the TF32 SGEMM's k-contiguous operands by registers vs by cp.async "
               "(cuda::set_mma_async_k), at 2 and 4 stages");
  app.add_flag("--conv-async-k-ab", conv_async_k_ab,
               "Also time the TF32 conv layers with cuda::set_mma_async_k off vs on, at 2 and 4 "
               "stages");
  app.add_flag("--conv-async-gather-ab", conv_async_gather_ab,
               "Also time the TF32 conv layers with their gathers by registers vs by 4-byte "
               "cp.async (cuda::set_conv_async_gather), at 2 and 4 stages");
  app.add_flag("--autotune-ab", autotune_ab,
               "Also time each conv layer's passes with the heuristic's kernels vs the autotuned "
               "ones, and list the picks (fp32, TF32, bf16)");
  app.add_flag("--direct-ab", direct_ab,
               "Also time the weight gradient of the layers the direct kernel takes, implicit GEMM "
               "vs direct (fp32, TF32, bf16)");
  app.add_flag("--phases-ab", phases_ab,
               "Also time the input gradient of ResNet's stride-2 layers, one GEMM vs one per "
               "phase (fp32, TF32, bf16)");
  app.add_flag("--window-ab", window_ab,
               "Also time the forward and input gradient of the layers the window kernel takes, "
               "GEMM vs window (fp32)");
  app.add_flag("--plans", plans,
               "Only print the heuristic's kernel configuration per layer, pass and precision "
               "(no GPU needed)");
  app.add_flag("--direct-banks", direct_banks,
               "Only print the direct weight gradient's modelled bank conflicts, dense vs padded "
               "band (no GPU needed)");
  app.add_flag("--wgrad-sweep", wgrad_sweep,
               "Also time the weight gradient (fp32, implicit) at split-K group counts 1, 2, 4...");
  echelon::bench::parse_args_or_exit(app, argc, argv);
#if ECHELON_WITH_CUDA
  std::vector<ConvShape> shapes;  // --nets: the named networks' shapes only
  for (const ConvShape& shape : net_conv_shapes(quick ? 2 : 128))
    if (nets.empty() || std::find(nets.begin(), nets.end(), shape.net) != nets.end())
      shapes.push_back(shape);
  if (plans) {
    plan_rows(shapes);
    return 0;
  }
  if (direct_banks) {
    direct_bank_rows(shapes);
    return 0;
  }
  if (cuda::device_count() == 0) {
    std::printf("exp_gpu_kernels: no GPU: nothing measured\n");
    return 0;
  }
  g_repeats = repeats;
  g_conv_calls = conv_calls == 0 && quick ? 2 : conv_calls;
  try {
    if (!conv_only) {
      if (!sgemm_only && !ab_only) {
        std::printf("== bandwidth (GB/s, bytes read + written; ratio to a D2D copy)\n");
        bandwidth_rows(quick ? int64_t{1} << 16 : int64_t{1} << 26, quick ? 64 : 1024);
      }
      const std::vector<int64_t> gemm_sizes =
          quick ? std::vector<int64_t>{128} : std::vector<int64_t>{1024, 2048, 4096};
      if (!ab_only) {
        std::printf("== SGEMM (square; fp32, then TF32 and bf16 tensor cores)\n");
        gemm_rows(gemm_sizes, Precision::Fp32);
        gemm_rows(gemm_sizes, Precision::Tf32);
        gemm_rows(gemm_sizes, Precision::Bf16);
      }
      if (stages_ab) mma_stages_gemm_rows(gemm_sizes);
      if (async_k_ab) mma_async_k_gemm_rows(gemm_sizes);
      if (sgemm_only) return 0;
    }
    // bf16: cuDNN's fp32 convolutions have no bf16 mode, so its column is TF32 tensor-op math.
    if (!ab_only) {
      std::printf("== convolution, batch %d (fp32, then TF32, then bf16)\n", quick ? 2 : 128);
      conv_rows(shapes, Precision::Fp32);
      conv_rows(shapes, Precision::Tf32);
      conv_rows(shapes, Precision::Bf16);
    }
    if (table_ab) {
      gather_table_rows(shapes, Precision::Fp32);
      gather_table_rows(shapes, Precision::Tf32);
    }
    if (fma_ab) fma_core_rows(shapes);
    if (tile_ab) {
      mma_tile_rows(shapes, Precision::Tf32);
      mma_tile_rows(shapes, Precision::Bf16);
    }
    if (conv_async_k_ab) conv_async_k_rows(shapes);
    if (conv_async_gather_ab) conv_async_gather_rows(shapes);
    if (autotune_ab)
      for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
        autotune_rows(shapes, precision);
    if (direct_ab)
      for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
        wgrad_direct_rows(shapes, precision);
    if (phases_ab)
      for (const Precision precision : {Precision::Fp32, Precision::Tf32, Precision::Bf16})
        dgrad_phases_rows(shapes, precision);
    if (window_ab) window_rows(shapes);
    if (wgrad_sweep) wgrad_sweep_rows(shapes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exp_gpu_kernels: %s\n", e.what());
    return 1;
  }
#else
  (void)quick, (void)repeats, (void)conv_only, (void)sgemm_only, (void)ab_only, (void)conv_calls,
      (void)wgrad_sweep, (void)table_ab, (void)fma_ab, (void)tile_ab, (void)stages_ab,
      (void)autotune_ab, (void)async_k_ab, (void)conv_async_k_ab, (void)conv_async_gather_ab,
      (void)direct_ab, (void)phases_ab, (void)window_ab, (void)direct_banks, (void)plans;
  std::printf("exp_gpu_kernels: built without CUDA: nothing measured\n");
#endif
  return 0;
}
