// Convolution, "ours", two algorithms (set_conv_algorithm; cuda/kernels/conv.h), chosen per pass
// as a ConvConfig: conv_heuristic (the rules below), or with set_conv_autotune the fastest of
// conv_candidates measured by the tuner (cuda/kernels/conv_tune.cu); run_conv runs either.
// - ImplicitGemm (the default): cuda/kernels/conv_gemm.cu, our GEMM tiles gathering straight from
//   x and grad_out; no columns buffer. Except the input gradient of layers with fewer than
//   kImplicitMinInputChannels input channels, and convolutions with an operand of 2^31 elements
//   or more (conv_gemm_fits), which keep the columns path; and the weight gradient of filters too
//   small for a GEMM tile, which takes the direct reduction of cuda/kernels/conv_direct.cu
//   (wgrad_direct_fits; set_conv_wgrad_direct(false) keeps the GEMM); and the input gradient of
//   strided convolutions without dilation, which runs one stride-1 GEMM per phase of the input
//   pixels (cuda/kernels/conv_phases.cu; set_conv_dgrad_phases(false) keeps the single GEMM).
//   Before all these, the forward and the input gradient (stride 1, or 2 with a 3-wide kernel)
//   of layers with at most 64 output channels of the pass take the sliding-window kernel of
//   cuda/kernels/conv_window.cu where it fits (conv_window_preferred; set_conv_window(false) keeps
//   the rules above); up to 512 channels it is one more autotuner candidate (conv_window_fits).
// - Im2colGemm: im2col (cuda/kernels/im2col.cu) into a columns buffer + our tiled SGEMM
//   (cuda/kernels/matmul.cu), kept as the baseline the parity tests and exp_gpu_kernels compare.
//   Images are processed in chunks so the columns buffer stays under kColumnsBudget bytes:
//   forward      y_n (O, L)   = w (O, R) x cols_n (R, L) + bias      (batched, w shared; the
//                bias added and conv2d_relu's ReLU applied in the GEMM epilogue)
//   grad input   cols_n (R, L) = w^T (R, O) x grad_out_n (O, L), then col2im (batched; adding
//                into grad_in when the call accumulates)
//   grad weight  grad_w (O, R) = sum_n grad_out_n (O, L) x cols_n^T (L, R): split-K over the
//                images (gemm_batch_reduce: each group of images summed in one block's
//                registers), then the groups' partials added in group order (deterministic)
//   with R = C*KH*KW and L = OH*OW.
// The bias gradient (both algorithms) is a per-channel reduction over a 2-D grid (channel x
// chunk, cuda/kernels/channels.cuh) with an ordered second pass; conv2d_relu's backward runs the
// ReLU's mask in the same pass (it writes the masked gradient the GEMMs then read), saving the
// mask's own pass over grad_out. CPU twins: tensor/cpu/conv.cpp (conv2d_backward_bias,
// conv2d_relu_backward_bias), relu_inplace: the ReLU twin (tensor/cpu/elementwise.cpp).
#include <echelon/cuda/kernels/conv.h>

#include <algorithm>
#include <atomic>

#include <cub/block/block_reduce.cuh>

#include <echelon/base/error.h>
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/kernels/conv_direct.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/conv_phases.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/conv_window.h>
#include <echelon/cuda/kernels/im2col.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/launch.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "channels.cuh"

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

// Bias gradient as a 2-D grid (cuda/kernels/channels.cuh): pass 1 sums chunk k of output
// channel o of grad_out (N, O, L) into partial (O, chunks); pass 2 adds the chunks in a fixed
// order. With relu_out (conv2d_relu): sums grad_out * (relu_out > 0) and writes it to masked.
// Pass 1 walks float4s when L % 4 == 0 and the pointers are aligned, kChannelUnroll loads in
// flight per thread (one dependent float at a time reached 0.52 of a copy on the H200), both
// operands loaded unconditionally; it reads n floats (2n, + n written, with the mask): ~0.9 of a
// copy is reachable by the bytes bench/exp_gpu_kernels counts.
template <int W>
__global__ void __launch_bounds__(kBlock)
    bias_grad_chunks_kernel(NormArgs a, ChannelChunks cc, const float* grad_out,
                            const float* relu_out, float* masked, double* partial) {
  using V = ChannelVec<W>;
  using Reduce = cub::BlockReduce<double, kBlock>;
  __shared__ typename Reduce::TempStorage temp;
  const int64_t o = blockIdx.y;
  double acc = 0.0;
  for_chunk<W>(
      a, cc, o, [&](const int64_t(&at)[kChannelUnroll], const bool(&live)[kChannelUnroll]) {
        typename V::type g[kChannelUnroll] ECH_SIM_ZEROED, r[kChannelUnroll] ECH_SIM_ZEROED;
#pragma unroll
        for (int k = 0; k < kChannelUnroll; ++k)
          if (live[k]) {
            g[k] = V::load(grad_out, at[k]);
            if (relu_out) r[k] = V::load(relu_out, at[k]);
          }
#pragma unroll
        for (int k = 0; k < kChannelUnroll; ++k)
          if (live[k]) {
#pragma unroll
            for (int l = 0; l < W; ++l) {
              float v = lane_of(g[k], l);
              if (relu_out && !(lane_of(r[k], l) > 0.0f)) v = 0.0f;
              set_lane(g[k], l, v);
              acc += v;
            }
            if (relu_out) V::store(masked, at[k], g[k]);
          }
      });
  const double total = Reduce(temp).Sum(acc);
  if (threadIdx.x == 0) partial[o * cc.chunks + blockIdx.x] = total;
}

__global__ void relu_inplace_kernel(float* y, int64_t count) {
  for (int64_t i = grid_start(); i < count; i += grid_step()) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

// One warp per channel (a serial loop over up to kMaxChunks chunks in one thread was a chain of
// dependent L2 loads): lane l adds chunks l, l + 32, ... in order, then a fixed shuffle tree.
constexpr int kWarp = 32;
__global__ void bias_grad_finish_kernel(const double* partial, int chunks, int64_t out_channels,
                                        float* grad_bias) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t o = grid_start() / kWarp; o < out_channels; o += warps) {
    double total = 0.0;
    for (int k = lane; k < chunks; k += kWarp) total += partial[o * chunks + k];
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
      total += __shfl_down_sync(0xffffffffu, total, offset);
    if (lane == 0) grad_bias[o] = static_cast<float>(total);
  }
}

// ---- helpers -----------------------------------------------------------------------------------

std::atomic<ConvAlgorithm> g_algorithm{ConvAlgorithm::ImplicitGemm};

// The implicit grad-input GEMM's rows are the input channels: below 8 (an image layer: 1 or 3)
// they fill at most a quarter of its smallest (32-row) tile, while the columns GEMM has
// C*KH*KW rows and no zero taps, so those layers keep im2col's GEMM + col2im (the emulated
// LeNet/AlexNet/VGG first layers ran 5-8x more instructions implicit; bench/RESULTS.md).
constexpr int64_t kImplicitMinInputChannels = 8;

bool use_implicit(const Conv2dGeometry& a) {
  return conv_algorithm() == ConvAlgorithm::ImplicitGemm && conv_gemm_fits(a);
}

#if ECHELON_CUDA_SIM
// The emulated GEMM is ~1000x slower: a 1 MiB budget keeps the chunked path reachable by
// test-sized shapes (tests/gpu/nn_gpu_test.cpp).
constexpr size_t kColumnsBudget = size_t{1} << 20;
#else
constexpr size_t kColumnsBudget = size_t{256} << 20;
#endif

// Scratch columns from the caching allocator for `images` images, freed on scope exit (safe right
// after the enqueue: the allocator hands a block out again only on the same stream).
class Columns {
 public:
  Columns(const Conv2dGeometry& a, int device, cudaStream_t stream) : device_(device) {
    per_image_ = a.c * a.kernel_h * a.kernel_w * a.out_h * a.out_w;
    const int64_t fit =
        static_cast<int64_t>(kColumnsBudget / sizeof(float)) / std::max<int64_t>(per_image_, 1);
    chunk_ = std::clamp<int64_t>(fit, 1, std::max<int64_t>(a.n, 1));
    data_ = static_cast<float*>(
        device_malloc(device, static_cast<size_t>(chunk_ * per_image_) * sizeof(float), stream));
  }
  ~Columns() { device_free(device_, data_); }
  Columns(const Columns&) = delete;
  Columns& operator=(const Columns&) = delete;
  float* data() const { return data_; }
  int64_t chunk() const { return chunk_; }
  int64_t per_image() const { return per_image_; }

 private:
  int device_;
  int64_t per_image_ = 0, chunk_ = 1;
  float* data_ = nullptr;
};

// How many image groups the weight-gradient split-K uses: enough (tiles x groups) blocks to
// fill the GPU, at most one per image, and at most kPartialBudget bytes of partial sums.
#if ECHELON_CUDA_SIM
constexpr int64_t kSplitTargetBlocks = 2;  // test shapes then get groups of several images
#else
constexpr int64_t kSplitTargetBlocks = 2 * 132;  // two blocks per SM of an H200
#endif
constexpr size_t kPartialBudget = size_t{64} << 20;

int64_t weight_groups(int64_t out_channels, int64_t rows, int64_t images) {
  const int64_t tiles = ((out_channels + 63) / 64) * ((rows + 63) / 64);  // the small GEMM tile
  const int64_t by_budget = std::max<int64_t>(static_cast<int64_t>(kPartialBudget / sizeof(float)) /
                                                  std::max<int64_t>(out_channels * rows, 1),
                                              1);
  return std::clamp<int64_t>((kSplitTargetBlocks + tiles - 1) / tiles, 1,
                             std::min(images, by_budget));
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

void set_conv_algorithm(ConvAlgorithm algorithm) {
  g_algorithm.store(algorithm);
}
ConvAlgorithm conv_algorithm() {
  return g_algorithm.load();
}

namespace {

void forward_columns(const ConvCall& c) {
  const Conv2dGeometry& a = c.geometry;
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, plane = a.out_h * a.out_w;
  Columns cols(a, c.device, c.stream);
  for (int64_t n0 = 0; n0 < a.n; n0 += cols.chunk()) {
    const int64_t images = std::min(cols.chunk(), a.n - n0);
    im2col(c.x + n0 * a.c * a.h * a.w, cols.data(), a.with_images(images), c.stream);
    // The bias (null: none) and the ReLU are applied in the GEMM's epilogue, not by passes
    // over y.
    gemm_strided_batched_row_bias(false, false, a.o, plane, rows, c.w, rows, 0, cols.data(), plane,
                                  cols.per_image(), c.bias, c.out + n0 * a.o * plane, plane,
                                  a.o * plane, images, c.relu, c.stream);
  }
}

void backward_input_columns(const ConvCall& c) {
  const Conv2dGeometry& a = c.geometry;
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, plane = a.out_h * a.out_w;
  Columns cols(a, c.device, c.stream);
  for (int64_t n0 = 0; n0 < a.n; n0 += cols.chunk()) {
    const int64_t images = std::min(cols.chunk(), a.n - n0);
    gemm_strided_batched(true, false, rows, plane, a.o, 1.0f, c.w, rows, 0,
                         c.grad_out + n0 * a.o * plane, plane, a.o * plane, 0.0f, cols.data(),
                         plane, cols.per_image(), images, c.stream);
    col2im(cols.data(), c.out + n0 * a.c * a.h * a.w, a.with_images(images), c.stream,
           c.accumulate);
  }
}

void backward_weight_columns(const ConvCall& c) {
  const Conv2dGeometry& a = c.geometry;
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, plane = a.out_h * a.out_w;
  const int64_t weights = a.o * rows;
  Columns cols(a, c.device, c.stream);
  const int64_t groups = weight_groups(a.o, rows, cols.chunk());
  // Partial weight gradients of the image groups (groups, O, R); none when one group.
  float* partial =
      groups > 1 ? static_cast<float*>(device_malloc(
                       c.device, static_cast<size_t>(groups * weights) * sizeof(float), c.stream))
                 : nullptr;
  try {
    for (int64_t n0 = 0; n0 < a.n; n0 += cols.chunk()) {
      const int64_t images = std::min(cols.chunk(), a.n - n0);
      const int64_t per_group = (images + groups - 1) / groups;
      const int64_t used = (images + per_group - 1) / per_group;
      const bool first = n0 == 0;
      im2col(c.x + n0 * a.c * a.h * a.w, cols.data(), a.with_images(images), c.stream);
      gemm_batch_reduce(false, true, a.o, rows, plane, 1.0f, c.grad_out + n0 * a.o * plane, plane,
                        a.o * plane, cols.data(), plane, cols.per_image(),
                        used > 1 || first ? 0.0f : 1.0f, used > 1 ? partial : c.out, rows, weights,
                        images, per_group, c.stream);
      if (used > 1) sum_groups(partial, used, weights, !first, c.out, c.stream);
    }
  } catch (...) {
    if (partial) device_free(c.device, partial);
    throw;
  }
  if (partial) device_free(c.device, partial);
}

void backward_weight(const ConvCall& c, const ConvConfig& config) {
  const Conv2dGeometry& a = c.geometry;
  if (a.n * a.out_h * a.out_w == 0) {
    ECH_CUDA_CHECK(cudaMemsetAsync(
        c.out, 0, static_cast<size_t>(a.o * a.c * a.kernel_h * a.kernel_w) * sizeof(float),
        c.stream));
    if (c.grad_bias)
      ECH_CUDA_CHECK(
          cudaMemsetAsync(c.grad_bias, 0, static_cast<size_t>(a.o) * sizeof(float), c.stream));
    return;
  }
  if (config.direct && c.grad_bias && wgrad_direct_sums_bias(a))
    return conv2d_backward_weight_direct(a, config.groups, c.grad_out, c.x, c.out, c.stream,
                                         c.grad_bias);
  if (config.direct)
    conv2d_backward_weight_direct(a, config.groups, c.grad_out, c.x, c.out, c.stream);
  else if (!config.im2col)
    conv2d_backward_weight_implicit(config, a, c.grad_out, c.x, c.out, c.stream);
  else
    backward_weight_columns(c);
  if (c.grad_bias) conv2d_backward_bias(a, c.grad_out, c.grad_bias, c.stream);
}

}  // namespace

ConvConfig conv_heuristic(ConvPass pass, const Conv2dGeometry& a) {
  // The window kernel wherever it fits, even the input gradient of layers with few input
  // channels (LeNet-5's conv2: one launch, where the columns path is a GEMM and col2im).
  if (use_implicit(a) && conv_window() && conv_window_preferred(pass, a))
    return ConvConfig{.window = true};
  const bool implicit =
      use_implicit(a) && (pass != ConvPass::BackwardData || a.c >= kImplicitMinInputChannels);
  if (!implicit) return ConvConfig{.im2col = true};
  if (pass == ConvPass::BackwardWeight && conv_wgrad_direct() && wgrad_direct_fits(a))
    return ConvConfig{.groups = wgrad_direct_groups(a), .direct = true};
  if (pass == ConvPass::BackwardData && conv_dgrad_phases() && dgrad_phases_fit(a)) {
    // One config for every phase (one ConvConfig is what the tuner times and caches per call),
    // chosen on the largest phase's stride-1 sub-problem: the GEMM each launch really runs.
    ConvConfig c = conv_gemm_heuristic(pass, dgrad_phase_bound(a));
    c.phases = true;
    c.groups = 1;  // a phase writes its pixels of grad_in in place: no split-K partials
    return c;
  }
  return conv_gemm_heuristic(pass, a);
}

std::vector<ConvConfig> conv_candidates(ConvPass pass, const Conv2dGeometry& a) {
  std::vector<ConvConfig> out;
  if (use_implicit(a) && pass == ConvPass::BackwardData && conv_dgrad_phases() &&
      dgrad_phases_fit(a))
    // The phased configs (the tiles of the largest phase's GEMM, as the heuristic), then the
    // single GEMM's below: the tuner times whole calls through run_conv, so each is one
    // cached, repeatable choice for the call.
    for (ConvConfig c : conv_gemm_candidates(pass, dgrad_phase_bound(a))) {
      if (c.groups > 1) continue;  // as the heuristic's: no split-K in a phase
      c.phases = true;
      out.push_back(c);
    }
  if (use_implicit(a)) {
    const std::vector<ConvConfig> single = conv_gemm_candidates(pass, a);
    out.insert(out.end(), single.begin(), single.end());
  }
  if (use_implicit(a) && pass == ConvPass::BackwardWeight && wgrad_direct_fits(a)) {
    // The heuristic's block count, a quarter of it, and one block per chunk (one block: the
    // gradient written without partials).
    const int64_t groups = wgrad_direct_groups(a), most = wgrad_direct_most_groups(a);
    std::vector<int64_t> counts{1, std::max<int64_t>(groups / 4, 1), groups, most};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    for (const int64_t g : counts) out.push_back(ConvConfig{.groups = g, .direct = true});
  }
  if (use_implicit(a) && conv_window_fits(pass, a)) out.push_back(ConvConfig{.window = true});
  out.push_back(ConvConfig{.im2col = true});
  return out;
}

void run_conv(const ConvCall& c, const ConvConfig& config) {
  const Conv2dGeometry& a = c.geometry;
  ECH_CHECK(!c.accumulate || c.pass == ConvPass::BackwardData, "conv2d ", name(c.pass),
            ": only the input gradient can accumulate into its output");
  const int64_t plane = a.out_h * a.out_w;
  switch (c.pass) {
    case ConvPass::Forward:
      if (a.n * a.o * plane == 0) return;
      if (config.window) return conv2d_forward_window(a, c.x, c.w, c.bias, c.out, c.stream, c.relu);
      if (!config.im2col)
        return conv2d_forward_implicit(config, a, c.x, c.w, c.bias, c.out, c.stream, c.relu);
      return forward_columns(c);
    case ConvPass::BackwardData:
      if (a.n * a.c * a.h * a.w == 0) return;
      if (config.window)
        return conv2d_backward_input_window(a, c.grad_out, c.w, c.out, c.stream, c.accumulate);
      if (!config.im2col && config.phases && dgrad_phases_fit(a))
        return conv2d_backward_input_phases(config, a, c.grad_out, c.w, c.out, c.stream,
                                            c.accumulate);
      if (!config.im2col)
        return conv2d_backward_input_implicit(config, a, c.grad_out, c.w, c.out, c.stream,
                                              c.accumulate);
      return backward_input_columns(c);
    case ConvPass::BackwardWeight:
      return backward_weight(c, config);
  }
}

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, bool relu) {
  const ConvCall call{.pass = ConvPass::Forward,
                      .geometry = a,
                      .x = x,
                      .w = w,
                      .bias = bias,
                      .relu = relu,
                      .out = y,
                      .device = device,
                      .stream = stream};
  run_conv(call, conv_config_for(call));
}

void relu_inplace(float* y, int64_t count, cudaStream_t stream) {
  launch_1d("relu_inplace", count, stream, relu_inplace_kernel, y, count);
}

void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream, bool accumulate) {
  const ConvCall call{.pass = ConvPass::BackwardData,
                      .geometry = a,
                      .w = w,
                      .grad_out = grad_out,
                      .out = grad_in,
                      .accumulate = accumulate,
                      .device = device,
                      .stream = stream};
  run_conv(call, conv_config_for(call));
}

bool conv2d_backward_weight_sums_bias(const Conv2dGeometry& a) {
  return conv_heuristic(ConvPass::BackwardWeight, a).direct && wgrad_direct_sums_bias(a);
}

void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream, float* grad_bias) {
  const ConvCall call{.pass = ConvPass::BackwardWeight,
                      .geometry = a,
                      .x = x,
                      .grad_out = grad_out,
                      .out = grad_w,
                      .grad_bias = grad_bias,
                      .device = device,
                      .stream = stream};
  run_conv(call, conv_config_for(call));
}

void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          cudaStream_t stream) {
  conv2d_relu_backward_bias(a, grad_out, nullptr, nullptr, grad_bias, stream);
}

void conv2d_relu_backward_bias(const Conv2dGeometry& a, const float* grad_out,
                               const float* relu_out, float* masked, float* grad_bias,
                               cudaStream_t stream) {
  if (a.o == 0) return;
  const NormArgs planes{a.n, a.o, a.out_h * a.out_w};  // grad_out as (N, O, L)
  const ChannelChunks cc = channel_chunks(planes);
  Scratch partial(static_cast<size_t>(a.o * cc.chunks) * sizeof(double), stream);
  const auto chunks = channel_vectorisable(planes, {grad_out, relu_out, masked})
                          ? bias_grad_chunks_kernel<kChannelVec>
                          : bias_grad_chunks_kernel<1>;
  ECH_LAUNCH(channel_grid(cc, a.o), kBlock, 0, stream, chunks)
  (planes, cc, grad_out, relu_out, masked, partial.as<double>());
  ECH_CUDA_CHECK_LAUNCH("conv2d_backward_bias (chunks)");
  launch_1d("conv2d_backward_bias", a.o * kWarp, stream, bias_grad_finish_kernel,
            partial.as<const double>(), cc.chunks, a.o, grad_bias);
}

}  // namespace echelon::cuda
