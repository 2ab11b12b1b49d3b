// Dispatch of the neural-network ops, part 1: convolution and pooling (tensor/ops.h, last
// section). Each op checks shapes, dtypes and devices with errors naming the op, makes inputs
// contiguous, then calls the naive CPU twin (tensor/cpu/{conv,pool}) or the CUDA launcher of the
// same name on the current stream of the tensors' device. CUDA kernels are float32 only.
#include <atomic>

#include <echelon/tensor/cpu/conv.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/cpu/pool.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_nn_checks.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/cudnn/conv.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/pool.h>
#endif

namespace echelon::ops {

using nn_detail::check_defined;
using nn_detail::check_float_like;
using nn_detail::check_shape;
using nn_detail::fail_not_cuda_build;
using nn_detail::ptr_or_null;
#if ECHELON_WITH_CUDA
using nn_detail::stream_of;
#endif

namespace {

std::atomic<ConvImpl> g_conv_impl{ConvImpl::Ours};
std::atomic<bool> g_deterministic{false};

// ---- conv -------------------------------------------------------------------------------------

ConvArgs conv_args(const Tensor& x, const Tensor& weight, const Conv2dParams& p, const char* op) {
  check_float_like(x, x, op, "input");
  check_float_like(weight, x, op, "weight");
  ECH_CHECK(x.dim() == 4, op, ": input must be (N, C, H, W), got shape ", x.shape());
  ECH_CHECK(weight.dim() == 4, op, ": weight must be (O, C, KH, KW), got shape ", weight.shape());
  ECH_CHECK(x.size(1) == weight.size(1), op, ": input ", x.shape(), " has ", x.size(1),
            " channels but weight ", weight.shape(), " expects ", weight.size(1));
  ECH_CHECK(p.stride_h > 0 && p.stride_w > 0 && p.dilation_h > 0 && p.dilation_w > 0 &&
                p.pad_h >= 0 && p.pad_w >= 0,
            op, ": stride and dilation must be positive and padding non-negative (stride ",
            p.stride_h, "x", p.stride_w, ", pad ", p.pad_h, "x", p.pad_w, ", dilation ",
            p.dilation_h, "x", p.dilation_w, ")");
  ConvArgs a;
  a.n = x.size(0);
  a.c = x.size(1);
  a.h = x.size(2);
  a.w = x.size(3);
  a.o = weight.size(0);
  a.kernel_h = weight.size(2);
  a.kernel_w = weight.size(3);
  a.stride_h = p.stride_h;
  a.stride_w = p.stride_w;
  a.pad_h = p.pad_h;
  a.pad_w = p.pad_w;
  a.dilation_h = p.dilation_h;
  a.dilation_w = p.dilation_w;
  a.out_h = (a.h + 2 * a.pad_h - a.dilation_h * (a.kernel_h - 1) - 1) / a.stride_h + 1;
  a.out_w = (a.w + 2 * a.pad_w - a.dilation_w * (a.kernel_w - 1) - 1) / a.stride_w + 1;
  ECH_CHECK(a.h + 2 * a.pad_h >= a.dilation_h * (a.kernel_h - 1) + 1 &&
                a.w + 2 * a.pad_w >= a.dilation_w * (a.kernel_w - 1) + 1,
            op, ": kernel ", weight.shape(), " (dilation ", p.dilation_h, "x", p.dilation_w,
            ") is larger than the padded input ", x.shape(), " (pad ", p.pad_h, "x", p.pad_w, ")");
  return a;
}

}  // namespace

void set_conv_impl(ConvImpl impl) {
  g_conv_impl.store(impl);
}
ConvImpl conv_impl() {
  return g_conv_impl.load();
}
void set_deterministic(bool on) {
  g_deterministic.store(on);
}
bool deterministic() {
  return g_deterministic.load();
}

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
              const Conv2dParams& p) {
  const char* op = "conv2d";
  const ConvArgs a = conv_args(x_in, weight_in, p, op);
  if (bias_in.defined()) {
    check_float_like(bias_in, x_in, op, "bias");
    check_shape(bias_in, {a.o}, op, "bias");
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
      cudnn::conv2d_forward(a, x.data<float>(), weight.data<float>(), ptr_or_null<float>(bias),
                            y.data<float>(), x.device().index, stream_of(x),
                            cudnn::AlgoPolicy{deterministic()});
#else
      ECH_FAIL(op, ": ConvImpl::Cudnn requested but Echelon was built without cuDNN");
#endif
    } else {
      cuda::conv2d_forward(a, x.data<float>(), weight.data<float>(), ptr_or_null<float>(bias),
                           y.data<float>(), x.device().index, stream_of(x));
    }
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    // im2col + BLAS is the fast CPU path; without BLAS the direct twin is faster than a naive GEMM.
    if (cpu::blas_available())
      cpu::conv2d_forward_gemm(a, x.data<scalar_t>(), weight.data<scalar_t>(),
                               ptr_or_null<scalar_t>(bias), y.data<scalar_t>());
    else
      cpu::conv2d_forward(a, x.data<scalar_t>(), weight.data<scalar_t>(),
                          ptr_or_null<scalar_t>(bias), y.data<scalar_t>());
  });
  return y;
}

Conv2dGrads conv2d_backward(const Tensor& grad_out_in, const Tensor& x_in, const Tensor& weight_in,
                            bool has_bias, bool need_input, const Conv2dParams& p) {
  const char* op = "conv2d_backward";
  const ConvArgs a = conv_args(x_in, weight_in, p, op);
  check_float_like(grad_out_in, x_in, op, "grad_out");
  check_shape(grad_out_in, {a.n, a.o, a.out_h, a.out_w}, op, "grad_out");
  const Tensor grad_out = grad_out_in.contiguous(), x = x_in.contiguous(),
               weight = weight_in.contiguous();
  Conv2dGrads grads;
  grads.weight = Tensor::empty(weight.shape(), x.dtype(), x.device());
  if (has_bias) grads.bias = Tensor::empty({a.o}, x.dtype(), x.device());
  if (need_input) grads.input = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    const int device = x.device().index;
    const cudaStream_t stream = stream_of(x);
    if (conv_impl() == ConvImpl::Cudnn) {
#if ECHELON_WITH_CUDNN
      const cudnn::AlgoPolicy policy{deterministic()};
      cudnn::conv2d_backward_weight(a, grad_out.data<float>(), x.data<float>(),
                                    grads.weight.data<float>(), device, stream, policy);
      if (has_bias)
        cudnn::conv2d_backward_bias(a, grad_out.data<float>(), grads.bias.data<float>(), device,
                                    stream);
      if (need_input)
        cudnn::conv2d_backward_input(a, grad_out.data<float>(), weight.data<float>(),
                                     grads.input.data<float>(), device, stream, policy);
#else
      ECH_FAIL(op, ": ConvImpl::Cudnn requested but Echelon was built without cuDNN");
#endif
    } else {
      cuda::conv2d_backward_weight(a, grad_out.data<float>(), x.data<float>(),
                                   grads.weight.data<float>(), device, stream);
      if (has_bias)
        cuda::conv2d_backward_bias(a, grad_out.data<float>(), grads.bias.data<float>(), stream);
      if (need_input)
        cuda::conv2d_backward_input(a, grad_out.data<float>(), weight.data<float>(),
                                    grads.input.data<float>(), device, stream);
    }
    return grads;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    const scalar_t* g = grad_out.data<scalar_t>();
    if (cpu::blas_available()) {
      cpu::conv2d_backward_weight_gemm(a, g, x.data<scalar_t>(), grads.weight.data<scalar_t>());
      if (need_input)
        cpu::conv2d_backward_input_gemm(a, g, weight.data<scalar_t>(),
                                        grads.input.data<scalar_t>());
    } else {
      cpu::conv2d_backward_weight(a, g, x.data<scalar_t>(), grads.weight.data<scalar_t>());
      if (need_input)
        cpu::conv2d_backward_input(a, g, weight.data<scalar_t>(), grads.input.data<scalar_t>());
    }
    if (has_bias) cpu::conv2d_backward_bias(a, g, grads.bias.data<scalar_t>());
  });
  return grads;
}

// ---- pool -------------------------------------------------------------------------------------

namespace {

// PyTorch's pooling_output_shape: floor or ceil, and in ceil mode the last window must start
// inside the input or its left padding.
int64_t pool_out_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, bool ceil_mode) {
  const int64_t span = in + 2 * pad - kernel;
  int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// Geometry of pooling an input of `shape` (N, C, H, W).
PoolArgs pool_geometry(const Shape& shape, const Pool2dParams& p, const char* op) {
  ECH_CHECK(shape.size() == 4, op, ": input must be (N, C, H, W), got shape ", shape);
  ECH_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, op,
            ": kernel and stride must be positive (kernel ", p.kernel_h, "x", p.kernel_w,
            ", stride ", p.stride_h, "x", p.stride_w, ")");
  ECH_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2,
            op, ": padding ", p.pad_h, "x", p.pad_w, " must be between 0 and half the kernel ",
            p.kernel_h, "x", p.kernel_w);
  PoolArgs a;
  a.n = shape[0];
  a.c = shape[1];
  a.h = shape[2];
  a.w = shape[3];
  a.kernel_h = p.kernel_h;
  a.kernel_w = p.kernel_w;
  a.stride_h = p.stride_h;
  a.stride_w = p.stride_w;
  a.pad_h = p.pad_h;
  a.pad_w = p.pad_w;
  a.count_include_pad = p.count_include_pad;
  ECH_CHECK(a.h + 2 * a.pad_h >= a.kernel_h && a.w + 2 * a.pad_w >= a.kernel_w, op, ": kernel ",
            p.kernel_h, "x", p.kernel_w, " is larger than the padded input ", shape);
  a.out_h = pool_out_size(a.h, a.kernel_h, a.pad_h, a.stride_h, p.ceil_mode);
  a.out_w = pool_out_size(a.w, a.kernel_w, a.pad_w, a.stride_w, p.ceil_mode);
  return a;
}

PoolArgs pool_args(const Tensor& x, const Pool2dParams& p, const char* op) {
  check_float_like(x, x, op, "input");
  return pool_geometry(x.shape(), p, op);
}

// Pool geometry for a backward call that only knows the input shape.
PoolArgs pool_args_for_shape(const Tensor& grad_out, const Shape& input_shape, const char* op) {
  ECH_CHECK(input_shape.size() == 4, op, ": input_shape must be (N, C, H, W), got ", input_shape);
  ECH_CHECK(grad_out.dim() == 4 && grad_out.size(0) == input_shape[0] &&
                grad_out.size(1) == input_shape[1],
            op, ": grad_out ", grad_out.shape(), " does not match input shape ", input_shape);
  PoolArgs a;
  a.n = input_shape[0];
  a.c = input_shape[1];
  a.h = input_shape[2];
  a.w = input_shape[3];
  a.out_h = grad_out.size(2);
  a.out_w = grad_out.size(3);
  return a;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dParams& p, Tensor* argmax) {
  const char* op = "max_pool2d";
  const PoolArgs a = pool_args(x_in, p, op);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty({a.n, a.c, a.out_h, a.out_w}, x.dtype(), x.device());
  Tensor indices = Tensor::empty(y.shape(), kInt64, x.device());
  if (argmax) *argmax = indices;
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::max_pool2d_forward(a, x.data<float>(), y.data<float>(), indices.data<int64_t>(),
                             stream_of(x));
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    cpu::max_pool2d_forward(a, x.data<scalar_t>(), y.data<scalar_t>(), indices.data<int64_t>());
  });
  return y;
}

Tensor max_pool2d_backward(const Tensor& grad_out_in, const Tensor& argmax_in,
                           const Shape& input_shape) {
  const char* op = "max_pool2d_backward";
  check_float_like(grad_out_in, grad_out_in, op, "grad_out");
  check_defined(argmax_in, op, "argmax");
  ECH_CHECK(argmax_in.dtype() == kInt64 && argmax_in.device() == grad_out_in.device(), op,
            ": argmax must be int64 on ", grad_out_in.device(), ", got ", argmax_in.describe());
  check_shape(argmax_in, grad_out_in.shape(), op, "argmax");
  const PoolArgs a = pool_args_for_shape(grad_out_in, input_shape, op);
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

Tensor avg_pool2d(const Tensor& x_in, const Pool2dParams& p) {
  const char* op = "avg_pool2d";
  const PoolArgs a = pool_args(x_in, p, op);
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
                           const Pool2dParams& p) {
  const char* op = "avg_pool2d_backward";
  check_float_like(grad_out_in, grad_out_in, op, "grad_out");
  const PoolArgs full = pool_geometry(input_shape, p, op);
  check_shape(grad_out_in, {full.n, full.c, full.out_h, full.out_w}, op, "grad_out");
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
