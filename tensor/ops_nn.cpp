// Dispatch of the neural-network ops, part 1: convolution and pooling (tensor/ops.h, last
// section). Each op checks shapes, dtypes and devices with errors naming the op, makes inputs
// contiguous, then calls the naive CPU twin (tensor/cpu/{conv,pool}) or the CUDA launcher of the
// same name on the current stream of the tensors' device. CUDA kernels are float32 only.
#include <atomic>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/fast/conv.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/cpu/pool.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/cudnn/conv.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/conv_tune.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/kernels/pool.h>
#endif

namespace echelon::ops {

using detail::check_defined;
using detail::check_float_like;
using detail::check_shape;
using detail::conv_geometry;
using detail::fail_not_cuda_build;
using detail::ptr_or_null;
#if ECHELON_WITH_CUDA
using detail::stream_of;
#endif

namespace {

std::atomic<ConvImpl> g_conv_impl{ConvImpl::Ours};
std::atomic<bool> g_deterministic{false};
std::atomic<bool> g_fused_ops{true};
std::atomic<Precision> g_precision{Precision::Fp32};

// ---- conv -------------------------------------------------------------------------------------

// The geometry of convolving x (N, C, H, W) with weight (O, C, KH, KW) through `window`.
Conv2dGeometry conv_geometry_of(const char* op, const Tensor& x, const Tensor& weight,
                                const Conv2dGeometry& window) {
  check_float_like(op, x, x, "input");
  check_float_like(op, weight, x, "weight");
  ECH_CHECK(x.dim() == 4, op, ": input must be (N, C, H, W), got shape ", x.shape());
  ECH_CHECK(weight.dim() == 4, op, ": weight must be (O, C, KH, KW), got shape ", weight.shape());
  ECH_CHECK(x.size(1) == weight.size(1), op, ": input ", x.shape(), " has ", x.size(1),
            " channels but weight ", weight.shape(), " expects ", weight.size(1));
  ECH_CHECK(weight.size(2) == window.kernel_h && weight.size(3) == window.kernel_w, op, ": weight ",
            weight.shape(), " does not match the ", window.kernel_h, "x", window.kernel_w,
            " kernel of the geometry");
  return conv_geometry(op, x.shape(), weight.size(0), window);
}

// The CPU convolution: the fast path (batched im2col + BLAS, tensor/cpu/fast/conv.h) when built
// with BLAS, unless CpuKernels::Naive or MatmulImpl::Naive asks for the naive twin.
bool cpu_conv_is_fast() {
  return cpu::blas_available() && matmul_impl() != MatmulImpl::Naive &&
         cpu_kernels() == CpuKernels::Fast;
}

// The CPU half of conv2d_backward: fills the gradients `grads` has allocated.
void cpu_conv2d_backward(const char* op, const Conv2dGeometry& a, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, Conv2dGrads& grads) {
  const bool need_weight = grads.weight.defined(), need_input = grads.input.defined(),
             has_bias = grads.bias.defined();
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    const scalar_t* g = grad_out.data<scalar_t>();
    if (cpu_conv_is_fast()) {
      if (need_weight)
        cpu::fast::conv2d_backward_weight(a, g, x.data<scalar_t>(), grads.weight.data<scalar_t>());
      if (need_input)
        cpu::fast::conv2d_backward_input(a, g, weight.data<scalar_t>(),
                                         grads.input.data<scalar_t>());
      if (has_bias) cpu::fast::conv2d_backward_bias(a, g, grads.bias.data<scalar_t>());
    } else {
      if (need_weight)
        cpu::conv2d_backward_weight(a, g, x.data<scalar_t>(), grads.weight.data<scalar_t>());
      if (need_input)
        cpu::conv2d_backward_input(a, g, weight.data<scalar_t>(), grads.input.data<scalar_t>());
      if (has_bias) cpu::conv2d_backward_bias(a, g, grads.bias.data<scalar_t>());
    }
  });
}

// y = ReLU(y) in place on the CPU (`y > 0 ? y : 0`, the ReLU twin's): conv2d's relu there.
void cpu_relu_in_place(Tensor& y) {
  ECH_DISPATCH_FLOATING(y.dtype(), "conv2d", {
    scalar_t* p = y.data<scalar_t>();
    const int64_t count = y.numel();
    for (int64_t i = 0; i < count; ++i) p[i] = p[i] > scalar_t(0) ? p[i] : scalar_t(0);
  });
}

// conv2d_relu's ReLU backward and bias gradient in one pass: grad_out * (relu_out > 0) and its
// per-channel sums, the CUDA kernel or the CPU path's twin (each in its own bias order).
Tensor relu_mask_and_bias(const Conv2dGeometry& a, const Tensor& grad_out, const Tensor& relu_out,
                          const Tensor& grad_bias, bool fast) {
  Tensor masked = Tensor::empty(grad_out.shape(), grad_out.dtype(), grad_out.device());
  if (grad_out.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(grad_out.device().index);
    cuda::conv2d_relu_backward_bias(a, grad_out.data<float>(), relu_out.data<float>(),
                                    masked.data<float>(), grad_bias.data<float>(),
                                    stream_of(grad_out));
    return masked;
#else
    fail_not_cuda_build("conv2d_backward");
#endif
  }
  ECH_DISPATCH_FLOATING(grad_out.dtype(), "conv2d_backward", {
    const scalar_t *g = grad_out.data<scalar_t>(), *y = relu_out.data<scalar_t>();
    if (fast)
      cpu::fast::conv2d_relu_backward_bias(a, g, y, masked.data<scalar_t>(),
                                           grad_bias.data<scalar_t>());
    else
      cpu::conv2d_relu_backward_bias(a, g, y, masked.data<scalar_t>(), grad_bias.data<scalar_t>());
  });
  return masked;
}

// Whether our CUDA weight gradient of `a` also sums its bias gradient (cuda/kernels/conv.h).
bool cuda_weight_gradient_sums_bias([[maybe_unused]] const Conv2dGeometry& a) {
#if ECHELON_WITH_CUDA
  return conv_impl() == ConvImpl::Ours && cuda::conv2d_backward_weight_sums_bias(a);
#else
  return false;
#endif
}

#if ECHELON_WITH_CUDA
// The CUDA input gradient (cuDNN's or ours, as conv_impl says) into grad_in: overwritten, or with
// accumulate added to (autograd's gradient sum; ours add in the store, bit for bit the gradient
// then axpy_, cuDNN by its beta = 1; no separate pass either way).
void cuda_conv2d_backward_input(const char* op, const Conv2dGeometry& a, const Tensor& grad_out,
                                const Tensor& weight, const Tensor& grad_in, bool accumulate) {
  cuda::DeviceGuard guard(grad_in.device().index);
  const int device = grad_in.device().index;
  const cudaStream_t stream = stream_of(grad_in);
  if (conv_impl() == ConvImpl::Cudnn) {
#if ECHELON_WITH_CUDNN
    const cudnn::AlgoPolicy policy{deterministic(), float32_precision(), conv_autotune()};
    cudnn::conv2d_backward_input(a, grad_out.data<float>(), weight.data<float>(),
                                 grad_in.data<float>(), device, stream, policy, accumulate);
#else
    ECH_FAIL(op, ": ConvImpl::Cudnn requested but Echelon was built without cuDNN");
#endif
  } else {
    cuda::conv2d_backward_input(a, grad_out.data<float>(), weight.data<float>(),
                                grad_in.data<float>(), device, stream, accumulate);
  }
}
#endif

}  // namespace

void set_conv_impl(ConvImpl impl) {
  g_conv_impl.store(impl);
}
ConvImpl conv_impl() {
  return g_conv_impl.load();
}
void set_fused_ops(bool on) {
  g_fused_ops.store(on, std::memory_order_relaxed);
}

bool fused_ops() {
  return g_fused_ops.load(std::memory_order_relaxed);
}

void set_deterministic(bool on) {
  g_deterministic.store(on);
}
bool deterministic() {
  return g_deterministic.load();
}
void set_float32_precision(Precision precision) {
  g_precision.store(precision);
#if ECHELON_WITH_CUDA
  cuda::set_float32_precision(precision);
#endif
}
Precision float32_precision() {
  return g_precision.load();
}

void set_conv_autotune([[maybe_unused]] bool on) {
#if ECHELON_WITH_CUDA
  cuda::set_conv_autotune(on);
#endif
}
bool conv_autotune() {
#if ECHELON_WITH_CUDA
  return cuda::conv_autotune();
#else
  return false;
#endif
}

std::vector<ConvTuneRow> conv_tune_picks() {
  std::vector<ConvTuneRow> rows;
#if ECHELON_WITH_CUDA
  for (const cuda::ConvTunePick& p : cuda::conv_tune_picks())
    rows.push_back({cuda::describe(p.geometry), cuda::name(p.pass), name(p.precision), p.pick,
                    p.heuristic, p.tuned_ms, p.heuristic_ms, p.candidates});
#if ECHELON_WITH_CUDNN
  for (const cudnn::BenchmarkPick& p : cudnn::benchmark_picks())
    rows.push_back({cuda::describe(p.geometry), p.direction, name(p.precision), "cuDNN " + p.pick,
                    "cuDNN " + p.heuristic, p.ms, p.heuristic_ms, p.candidates});
#endif
#endif
  return rows;
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dGeometry& window, bool relu) {
  const char* op = "conv2d";
  const Conv2dGeometry a = conv_geometry_of(op, x_in, weight_in, window);
  if (bias_in.defined()) {
    check_float_like(op, bias_in, x_in, "bias");
    check_shape(op, bias_in, {a.o}, "bias");
  }
  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  Tensor y = Tensor::empty({a.n, a.o, a.out_h, a.out_w}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    if (conv_impl() == ConvImpl::Cudnn) {
#if ECHELON_WITH_CUDNN
      cudnn::conv2d_forward(
          a, x.data<float>(), weight.data<float>(), ptr_or_null<float>(bias), y.data<float>(),
          x.device().index, stream_of(x),
          cudnn::AlgoPolicy{deterministic(), float32_precision(), conv_autotune()});
      if (relu) cuda::relu_inplace(y.data<float>(), y.numel(), stream_of(x));
#else
      ECH_FAIL(op, ": ConvImpl::Cudnn requested but Echelon was built without cuDNN");
#endif
    } else {
      cuda::conv2d_forward(a, x.data<float>(), weight.data<float>(), ptr_or_null<float>(bias),
                           y.data<float>(), x.device().index, stream_of(x), relu);
    }
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    // Without BLAS the direct twin is faster than im2col + a naive GEMM.
    if (cpu_conv_is_fast())
      cpu::fast::conv2d_forward(a, x.data<scalar_t>(), weight.data<scalar_t>(),
                                ptr_or_null<scalar_t>(bias), y.data<scalar_t>());
    else
      cpu::conv2d_forward(a, x.data<scalar_t>(), weight.data<scalar_t>(),
                          ptr_or_null<scalar_t>(bias), y.data<scalar_t>());
  });
  // The CPU paths' stores (Winograd, direct, im2col + BLAS) stay ReLU-free: one more pass here.
  if (relu) cpu_relu_in_place(y);
  return y;
}

Conv2dGrads conv2d_backward(const Tensor& grad_out_in, const Tensor& x_in, const Tensor& weight_in,
                            bool has_bias, bool need_input, const Conv2dGeometry& window,
                            bool need_weight, const Tensor& input_sum, const Tensor& relu_out) {
  const char* op = "conv2d_backward";
  const Conv2dGeometry a = conv_geometry_of(op, x_in, weight_in, window);
  check_float_like(op, grad_out_in, x_in, "grad_out");
  check_shape(op, grad_out_in, {a.n, a.o, a.out_h, a.out_w}, "grad_out");
  if (relu_out.defined()) {
    check_float_like(op, relu_out, x_in, "relu_out");
    check_shape(op, relu_out, {a.n, a.o, a.out_h, a.out_w}, "relu_out");
    // Without a bias there is no pass to share: the ReLU's backward, then the convolution's.
    // cuDNN computes its own bias gradient (its order of sums), and so does our direct weight
    // gradient where it runs: composed too, so the values stay those of --no-fuse bit for bit.
    if (!has_bias || (x_in.is_cuda() && conv_impl() == ConvImpl::Cudnn) ||
        (x_in.is_cuda() && need_weight && cuda_weight_gradient_sums_bias(a)))
      return conv2d_backward(unary_backward(UnaryOp::Relu, grad_out_in, relu_out, relu_out), x_in,
                             weight_in, has_bias, need_input, window, need_weight, input_sum);
    Tensor grad_bias = Tensor::empty({a.o}, x_in.dtype(), x_in.device());
    const Tensor masked = relu_mask_and_bias(a, grad_out_in.contiguous(), relu_out.contiguous(),
                                             grad_bias, cpu_conv_is_fast());
    Conv2dGrads grads =
        conv2d_backward(masked, x_in, weight_in, false, need_input, window, need_weight, input_sum);
    grads.bias = grad_bias;
    return grads;
  }
  if (input_sum.defined()) {
    ECH_CHECK(need_input, op, ": input_sum needs need_input");
    check_float_like(op, input_sum, x_in, "input_sum");
    check_shape(op, input_sum, x_in.shape(), "input_sum");
    ECH_CHECK(input_sum.is_contiguous(), op, ": input_sum ", input_sum.describe(),
              " is added to in place and must be contiguous");
    const bool fast_cpu_adds = !x_in.is_cuda() && x_in.dtype() == kFloat32 && cpu_conv_is_fast() &&
                               cpu::fast::conv2d_backward_input_adds(a);
    if (x_in.is_cuda() || fast_cpu_adds) {  // added in the store: no separate pass
      Conv2dGrads grads =
          conv2d_backward(grad_out_in, x_in, weight_in, has_bias, false, window, need_weight);
      const Tensor grad_out = grad_out_in.contiguous(), weight = weight_in.contiguous();
      if (x_in.is_cuda()) {
#if ECHELON_WITH_CUDA
        cuda_conv2d_backward_input(op, a, grad_out, weight, input_sum, true);
#else
        fail_not_cuda_build(op);
#endif
      } else {
        cpu::fast::conv2d_backward_input_add(a, grad_out.data<float>(), weight.data<float>(),
                                             input_sum.data<float>());
      }
      grads.input = input_sum;
      return grads;
    }
    Conv2dGrads grads =
        conv2d_backward(grad_out_in, x_in, weight_in, has_bias, true, window, need_weight);
    Tensor sum = input_sum;
    axpy_(sum, grads.input, 1.0);
    grads.input = input_sum;
    return grads;
  }
  const Tensor grad_out = grad_out_in.contiguous(), x = x_in.contiguous(),
               weight = weight_in.contiguous();
  Conv2dGrads grads;
  if (need_weight) grads.weight = Tensor::empty(weight.shape(), x.dtype(), x.device());
  if (has_bias) grads.bias = Tensor::empty({a.o}, x.dtype(), x.device());
  if (need_input) grads.input = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    const int device = x.device().index;
    const cudaStream_t stream = stream_of(x);
    if (conv_impl() == ConvImpl::Cudnn) {
#if ECHELON_WITH_CUDNN
      // As the forward: under tf32 / bf16 tensor-op math first, as our kernels do.
      const cudnn::AlgoPolicy policy{deterministic(), float32_precision(), conv_autotune()};
      if (need_weight)
        cudnn::conv2d_backward_weight(a, grad_out.data<float>(), x.data<float>(),
                                      grads.weight.data<float>(), device, stream, policy);
      if (has_bias)
        cudnn::conv2d_backward_bias(a, grad_out.data<float>(), grads.bias.data<float>(), device,
                                    stream);
#else
      ECH_FAIL(op, ": ConvImpl::Cudnn requested but Echelon was built without cuDNN");
#endif
    } else {
      // The bias gradient comes with the weight's: the direct kernel sums it in the same pass.
      if (need_weight)
        cuda::conv2d_backward_weight(a, grad_out.data<float>(), x.data<float>(),
                                     grads.weight.data<float>(), device, stream,
                                     has_bias ? grads.bias.data<float>() : nullptr);
      else if (has_bias)
        cuda::conv2d_backward_bias(a, grad_out.data<float>(), grads.bias.data<float>(), stream);
    }
    if (need_input) cuda_conv2d_backward_input(op, a, grad_out, weight, grads.input, false);
    return grads;
#else
    fail_not_cuda_build(op);
#endif
  }
  cpu_conv2d_backward(op, a, grad_out, x, weight, grads);
  return grads;
}

// ---- pool -------------------------------------------------------------------------------------

namespace {

// `window`'s geometry over an input of `shape` (N, C, H, W), after checking the window.
Pool2dGeometry pool_geometry(const char* op, const Shape& shape, const Pool2dGeometry& window) {
  const Pool2dGeometry& p = window;
  ECH_CHECK(shape.size() == 4, op, ": input must be (N, C, H, W), got shape ", shape);
  ECH_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op,
            ": kernel and stride must be positive (kernel ", p.kernel_h, "x", p.kernel_w,
            ", stride ", p.stride_h, "x", p.stride_w, ")");
  ECH_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2,
            op, ": padding ", p.pad_h, "x", p.pad_w, " must be between 0 and half the kernel ",
            p.kernel_h, "x", p.kernel_w);
  ECH_CHECK(shape[2] + 2 * p.pad_h >= p.kernel_h && shape[3] + 2 * p.pad_w >= p.kernel_w, op,
            ": kernel ", p.kernel_h, "x", p.kernel_w, " is larger than the padded input ", shape);
  return window.for_input(shape[0], shape[1], shape[2], shape[3]);
}

Pool2dGeometry pool_geometry_of(const char* op, const Tensor& x, const Pool2dGeometry& window) {
  check_float_like(op, x, x, "input");
  return pool_geometry(op, x.shape(), window);
}

// The checks of both max_pool2d_backward overloads: grad_out float, argmax int64 (N, C, OH, OW) on
// its device, input_shape (N, C, H, W). The shapes of the result (the window is the default).
Pool2dGeometry max_pool_backward_geometry(const char* op, const Tensor& grad_out,
                                          const Tensor& argmax, const Shape& input_shape) {
  check_float_like(op, grad_out, grad_out, "grad_out");
  check_defined(op, argmax, "argmax");
  ECH_CHECK(argmax.dtype() == kInt64 && argmax.device() == grad_out.device(), op,
            ": argmax must be int64 on ", grad_out.device(), ", got ", argmax.describe());
  check_shape(op, argmax, grad_out.shape(), "argmax");
  ECH_CHECK(input_shape.size() == 4, op, ": input_shape must be (N, C, H, W), got ", input_shape);
  ECH_CHECK(grad_out.dim() == 4 && grad_out.size(0) == input_shape[0] &&
                grad_out.size(1) == input_shape[1],
            op, ": grad_out ", grad_out.shape(), " does not match input shape ", input_shape);
  Pool2dGeometry a;
  a.n = input_shape[0];
  a.c = input_shape[1];
  a.h = input_shape[2];
  a.w = input_shape[3];
  a.out_h = grad_out.size(2);
  a.out_w = grad_out.size(3);
  return a;
}

// The window overload's precondition (ops.h) for the naive twin, which indexes with argmax
// (N, C, OH, OW): each index lies in its own window of a.
void check_argmax_in_windows(const char* op, const Pool2dGeometry& a, const Tensor& argmax) {
  const std::vector<int64_t> indices = argmax.to_vector<int64_t>();
  for (int64_t p = 0, q = 0; p < a.n * a.c; ++p)
    for (int64_t oh = 0; oh < a.out_h; ++oh)
      for (int64_t ow = 0; ow < a.out_w; ++ow, ++q)
        ECH_CHECK(a.window_holds(oh, ow, indices[static_cast<size_t>(q)]), op, ": argmax index ",
                  indices[static_cast<size_t>(q)], " of output (", p / a.c, ", ", p % a.c, ", ", oh,
                  ", ", ow, ") is outside its ", a.kernel_h, "x", a.kernel_w, " window at row ",
                  oh * a.stride_h - a.pad_h, ", column ", ow * a.stride_w - a.pad_w, " of the ",
                  a.h, "x", a.w, " input plane");
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dGeometry& window, Tensor* argmax,
                  bool relu_first) {
  const char* op = "max_pool2d";
  const Pool2dGeometry a = pool_geometry_of(op, x_in, window);
  const bool fused = relu_first && (x_in.is_cuda() || cpu_kernels() == CpuKernels::Fast);
  if (relu_first && !fused) return max_pool2d(relu(x_in), window, argmax);  // the composition
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({a.n, a.c, a.out_h, a.out_w}, x.dtype(), x.device());
  Tensor indices = Tensor::empty(y.shape(), kInt64, x.device());
  if (argmax) *argmax = indices;
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::max_pool2d_forward(a, x.data<float>(), y.data<float>(), indices.data<int64_t>(), fused,
                             stream_of(x));
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    if (cpu_kernels() == CpuKernels::Fast)
      cpu::fast::max_pool2d_forward(a, x.data<scalar_t>(), y.data<scalar_t>(),
                                    indices.data<int64_t>(), fused);
    else
      cpu::max_pool2d_forward(a, x.data<scalar_t>(), y.data<scalar_t>(), indices.data<int64_t>());
  });
  return y;
}

Tensor max_pool2d_backward(const Tensor& grad_out_in, const Tensor& argmax_in,
                           const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  const Pool2dGeometry a = max_pool_backward_geometry(op, grad_out_in, argmax_in, input_shape);
  const Tensor grad_out = grad_out_in.contiguous(), argmax = argmax_in.contiguous();
  Tensor grad_in = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
  if (grad_in.numel() == 0) return grad_in;
  if (grad_out.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(grad_out.device().index);
    cuda::max_pool2d_backward(a, grad_out.data<float>(), argmax.data<int64_t>(),
                              grad_in.data<float>(), stream_of(grad_out));
    return grad_in;
#else
    fail_not_cuda_build(op);
#endif
  }
  if (cpu_kernels() == CpuKernels::Fast) {  // checks each index as it scatters
    ECH_DISPATCH_FLOATING(grad_out.dtype(), op, {
      cpu::fast::max_pool2d_backward(a, grad_out.data<scalar_t>(), argmax.data<int64_t>(),
                                     grad_in.data<scalar_t>());
    });
    return grad_in;
  }
  // The twin indexes with argmax: refuse indices that would write outside their plane.
  for (int64_t idx : argmax.to_vector<int64_t>())
    ECH_CHECK(idx >= 0 && idx < a.h * a.w, op, ": argmax index ", idx, " is outside the ", a.h, "x",
              a.w, " plane of input ", input_shape);
  ECH_DISPATCH_FLOATING(grad_out.dtype(), op, {
    cpu::max_pool2d_backward(a, grad_out.data<scalar_t>(), argmax.data<int64_t>(),
                             grad_in.data<scalar_t>());
  });
  return grad_in;
}

Tensor max_pool2d_backward(const Tensor& grad_out_in, const Tensor& argmax_in,
                           const Shape& input_shape, const Pool2dGeometry& window,
                           const Tensor& relu_out_in) {
  const char* op = "max_pool2d_backward";
  max_pool_backward_geometry(op, grad_out_in, argmax_in, input_shape);
  const Pool2dGeometry a = pool_geometry(op, input_shape, window);
  check_shape(op, grad_out_in, {a.n, a.c, a.out_h, a.out_w}, "grad_out");
  const bool masked = relu_out_in.defined();
  if (masked) {
    check_float_like(op, relu_out_in, grad_out_in, "relu_out");
    check_shape(op, relu_out_in, grad_out_in.shape(), "relu_out");
  }
  const Tensor grad_out = grad_out_in.contiguous(), argmax = argmax_in.contiguous();
  const Tensor relu_out = masked ? relu_out_in.contiguous() : Tensor();
  Tensor grad_in = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
  if (grad_in.numel() == 0) return grad_in;
  if (grad_out.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(grad_out.device().index);
    cuda::max_pool2d_backward_gather(
        a, grad_out.data<float>(), argmax.data<int64_t>(), grad_in.data<float>(),
        masked ? relu_out.data<float>() : nullptr, stream_of(grad_out));
    return grad_in;
#else
    fail_not_cuda_build(op);
#endif
  }
  const bool fast = cpu_kernels() == CpuKernels::Fast;  // checks each index as it scatters
  if (!fast) check_argmax_in_windows(op, a, argmax);
  ECH_DISPATCH_FLOATING(grad_out.dtype(), op, {
    const scalar_t* y = masked ? relu_out.data<scalar_t>() : nullptr;
    if (fast)
      cpu::fast::max_pool2d_backward_in_windows(
          a, grad_out.data<scalar_t>(), argmax.data<int64_t>(), grad_in.data<scalar_t>(), y);
    else
      cpu::max_pool2d_backward(a, grad_out.data<scalar_t>(), argmax.data<int64_t>(),
                               grad_in.data<scalar_t>(), y);
  });
  return grad_in;
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dGeometry& window) {
  const char* op = "avg_pool2d";
  const Pool2dGeometry a = pool_geometry_of(op, x_in, window);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({a.n, a.c, a.out_h, a.out_w}, x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::avg_pool2d_forward(a, x.data<float>(), y.data<float>(), stream_of(x));
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op,
                        { cpu::avg_pool2d_forward(a, x.data<scalar_t>(), y.data<scalar_t>()); });
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad_out_in, const Shape& input_shape,
                           const Pool2dGeometry& window) {
  const char* op = "avg_pool2d_backward";
  check_float_like(op, grad_out_in, grad_out_in, "grad_out");
  const Pool2dGeometry full = pool_geometry(op, input_shape, window);
  check_shape(op, grad_out_in, {full.n, full.c, full.out_h, full.out_w}, "grad_out");
  const Tensor grad_out = grad_out_in.contiguous();
  Tensor grad_in = Tensor::empty(input_shape, grad_out.dtype(), grad_out.device());
  if (grad_in.numel() == 0) return grad_in;
  if (grad_out.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(grad_out.device().index);
    cuda::avg_pool2d_backward(full, grad_out.data<float>(), grad_in.data<float>(),
                              stream_of(grad_out));
    return grad_in;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(grad_out.dtype(), op, {
    cpu::avg_pool2d_backward(full, grad_out.data<scalar_t>(), grad_in.data<scalar_t>());
  });
  return grad_in;
}

}  // namespace echelon::ops
