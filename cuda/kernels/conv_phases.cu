// The input gradient of a strided convolution by phases (cuDNN's strided dgrad does the same).
// With stride s and dilation 1, input pixel h = rh + sh*i (phase rh in [0, sh)) receives tap ki
// only when (h + ph - ki) % sh == 0, i.e. ki = k0 + sh*t with k0 = (rh + ph) % sh; then
// oh = (h + ph - ki) / sh = i + e - t with e = (rh + ph - k0) / sh. So phase (rh, rw) is a
// stride-1 input gradient on its own: input (Hp, Wp) = (ceil((H - rh)/sh), ...), kernel
// (KHp, KWp) = (#{ki = k0h mod sh}, ...), padding (e_h, e_w), the ORIGINAL grad_out (N, O, OH, OW)
// (out_h/out_w set explicitly; its gathers bound-check oh < OH), and the weights
// w[:, :, k0h::sh, k0w::sw]. Each phase runs conv_gemm.cu's grad-input GEMM (K = O*KHp*KWp
// instead of O*KH*KW) with a store that puts its pixel (i, j) at (rh + sh*i, rw + sw*j) of the
// full grad_in (GradInPhase). As rh runs over [0, sh), k0h runs over every residue once, so
// each tap belongs to exactly one phase class and the per-phase weights are a permutation of w:
// one launch packs them, class (k0h, k0w) after class, each block (O, C, KHp, KWp).
// A phase with no tap (KH < sh: 1x1 stride 2, 3x3 stride 4) receives nothing: grad_in is zeroed
// first when such a phase has pixels, and the GEMMs write the rest.
// Accumulating (the autograd engine's gradient sum, ConvCall::accumulate), each phase's GEMM adds
// its finished value in its store (bit for bit grad_in + value, as the old separate axpy) and
// the zeroing is skipped: a tapless phase's pixels keep the sum (the axpy added 0 there, which
// differs only by turning a -0 sum into +0).
// CPU twin: the naive input gradient of tensor/cpu/conv.cpp. The packing kernel is internal to
// this pass (like sum_groups in conv_gemm.cu): its check is the pass's result against the twin
// (tests/gpu/conv_gpu_test.cpp, "phases").
#include <echelon/cuda/kernels/conv_phases.h>

#include <atomic>
#include <vector>

#include <echelon/cuda/check.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/switches.h>
#include <echelon/kernels/fast_div.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "channels.cuh"

namespace echelon::cuda {
namespace {

// Taps ki in [0, kernel) of class k0 (ki % stride == k0), and those of the classes below k0.
ECH_HD int taps_in_class(int kernel, int stride, int k0) {
  return kernel / stride + (k0 < kernel % stride ? 1 : 0);
}
ECH_HD int taps_below_class(int kernel, int stride, int k0) {
  const int rest = kernel % stride;
  return kernel / stride * k0 + (k0 < rest ? k0 : rest);
}

// Where class (k0h, k0w)'s block (O, C, KHp, KWp) starts in the packed weights: the classes in
// row-major order, a row of classes k0h holding KHp(k0h) * KW taps per (o, c).
struct PackedWeights {
  int filters;  // O * C
  int kernel_h, kernel_w, stride_h, stride_w;
  FastDiv by_taps, by_kernel_w, by_stride_h, by_stride_w;

  explicit PackedWeights(const Conv2dGeometry& a)
      : filters(static_cast<int>(a.o * a.c)),
        kernel_h(static_cast<int>(a.kernel_h)),
        kernel_w(static_cast<int>(a.kernel_w)),
        stride_h(static_cast<int>(a.stride_h)),
        stride_w(static_cast<int>(a.stride_w)),
        by_taps(kernel_h * kernel_w),
        by_kernel_w(kernel_w),
        by_stride_h(stride_h),
        by_stride_w(stride_w) {}

  ECH_HD int class_offset(int k0h, int k0w) const {
    return filters *
           (taps_below_class(kernel_h, stride_h, k0h) * kernel_w +
            taps_in_class(kernel_h, stride_h, k0h) * taps_below_class(kernel_w, stride_w, k0w));
  }
};

// ---- kernels ------------------------------------------------------------------------------------

// packed (the classes' (O, C, KHp, KWp) blocks) = w (O, C, KH, KW) permuted: one thread per
// weight, ki = k0h + sh*t and kj = k0w + sw*u to (class (k0h, k0w), filter, t, u). 32-bit
// indices: conv_gemm_fits keeps w below 2^31 elements.
__global__ void pack_phase_weights_kernel(PackedWeights p, const float* w, float* packed) {
  const int64_t count = static_cast<int64_t>(p.filters) * p.kernel_h * p.kernel_w;
  for (int64_t e = grid_start(); e < count; e += grid_step()) {
    int filter, tap, ki, kj, t, k0h, u, k0w;
    p.by_taps.divmod(static_cast<int>(e), filter, tap);
    p.by_kernel_w.divmod(tap, ki, kj);
    p.by_stride_h.divmod(ki, t, k0h);
    p.by_stride_w.divmod(kj, u, k0w);
    const int kh_class = taps_in_class(p.kernel_h, p.stride_h, k0h);
    const int kw_class = taps_in_class(p.kernel_w, p.stride_w, k0w);
    packed[p.class_offset(k0h, k0w) + (filter * kh_class + t) * kw_class + u] = w[e];
  }
}

// ---- launchers ----------------------------------------------------------------------------------

std::atomic<bool>& phases_flag() {
  static std::atomic<bool> flag = switches::conv_dgrad_phases();
  return flag;
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Phase (rh, rw): its stride-1 sub-problem, where its pixels land, and its weights' class.
struct Phase {
  Conv2dGeometry sub;
  GradInPhase place;
  int k0h, k0w;
};

Phase phase_of(const Conv2dGeometry& a, int64_t rh, int64_t rw) {
  Phase p;
  p.k0h = static_cast<int>((rh + a.pad_h) % a.stride_h);
  p.k0w = static_cast<int>((rw + a.pad_w) % a.stride_w);
  Conv2dGeometry& s = p.sub;
  s = a;  // n, c, o and grad_out's out_h, out_w stay
  s.h = a.h > rh ? ceil_div(a.h - rh, a.stride_h) : 0;
  s.w = a.w > rw ? ceil_div(a.w - rw, a.stride_w) : 0;
  s.kernel_h = taps_in_class(static_cast<int>(a.kernel_h), static_cast<int>(a.stride_h), p.k0h);
  s.kernel_w = taps_in_class(static_cast<int>(a.kernel_w), static_cast<int>(a.stride_w), p.k0w);
  s.pad_h = (rh + a.pad_h - p.k0h) / a.stride_h;
  s.pad_w = (rw + a.pad_w - p.k0w) / a.stride_w;
  s.stride_h = s.stride_w = 1;
  p.place = {a.h, a.w, rh, rw, a.stride_h, a.stride_w};
  return p;
}

}  // namespace

bool dgrad_phases_fit(const Conv2dGeometry& a) {
  return (a.stride_h > 1 || a.stride_w > 1) && a.dilation_h == 1 && a.dilation_w == 1;
}

Conv2dGeometry dgrad_phase_bound(const Conv2dGeometry& a) {
  Conv2dGeometry b = phase_of(a, 0, 0).sub;  // phase (0, 0) has the most pixels
  b.kernel_h = ceil_div(a.kernel_h, a.stride_h);
  b.kernel_w = ceil_div(a.kernel_w, a.stride_w);
  return b;
}

void conv2d_backward_input_phases(const ConvConfig& config, const Conv2dGeometry& a,
                                  const float* grad_out, const float* w, float* grad_in,
                                  cudaStream_t stream, bool accumulate) {
  const PackedWeights layout(a);
  const int64_t weights = a.o * a.c * a.kernel_h * a.kernel_w;
  Scratch packed(static_cast<size_t>(weights) * sizeof(float), stream);  // the classes' blocks
  launch_1d("conv2d_backward_input (phase weights)", weights, stream, pack_phase_weights_kernel,
            layout, w, packed.as<float>());
  std::vector<Phase> phases;
  bool tapless = false;  // a phase with pixels but no tap: its pixels are zeros
  for (int64_t rh = 0; rh < a.stride_h; ++rh)
    for (int64_t rw = 0; rw < a.stride_w; ++rw) {
      const Phase p = phase_of(a, rh, rw);
      if (p.sub.h * p.sub.w == 0) continue;
      if (p.sub.kernel_h * p.sub.kernel_w == 0)
        tapless = true;
      else
        phases.push_back(p);
    }
  if (tapless && !accumulate)
    ECH_CUDA_CHECK(cudaMemsetAsync(
        grad_in, 0, static_cast<size_t>(a.n * a.c * a.h * a.w) * sizeof(float), stream));
  for (const Phase& p : phases)
    conv2d_backward_input_implicit(config, p.sub, grad_out,
                                   packed.as<const float>() + layout.class_offset(p.k0h, p.k0w),
                                   grad_in, stream, accumulate, &p.place);
}

void set_conv_dgrad_phases(bool on) {
  phases_flag().store(on, std::memory_order_relaxed);
}

bool conv_dgrad_phases() {
  return phases_flag().load(std::memory_order_relaxed);
}

}  // namespace echelon::cuda
