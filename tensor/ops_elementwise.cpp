// Dispatch for the elementwise family: checks, then the CPU twin (tensor/cpu/elementwise.h) or
// the CUDA launcher (cuda/kernels/elementwise.h) on the device's current stream.
#include <echelon/tensor/cpu/elementwise.h>
#include <echelon/tensor/cpu/fast/elementwise.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/elementwise.h>
#endif

namespace echelon::ops {
using detail::broadcast_indexer;
using detail::indexer_of;

namespace {
// The maps that compute on bfloat16 tensors (in float, each result rounded to nearest even as it
// is stored; the CPU twin and the CUDA kernel alike): the bandwidth ops of a ResNet step besides
// its GEMMs, so far ReLU (forward and backward) and add. Other ops refuse bfloat16 (dtype_hint).
bool bf16_computes(UnaryOp op) {
  return op == UnaryOp::Relu;
}
bool bf16_computes(BinaryOp op) {
  return op == BinaryOp::Add;
}

// The fast CPU path (tensor/cpu/fast/elementwise.h) takes contiguous CPU tensors.
bool fast_cpu(const Tensor& t) {
  return !t.is_cuda() && cpu_kernels() == CpuKernels::Fast && t.is_contiguous();
}

// When `small` is a contiguous row that broadcasts along the leading dims of `big` (a bias
// (C) against (N, C)), or has big's shape: the number of elements of that row, else 0.
int64_t trailing_row(const Tensor& small, const Tensor& big) {
  if (!fast_cpu(small) || !fast_cpu(big)) return 0;
  const Shape& s = small.shape();
  const Shape& b = big.shape();
  size_t lead = 0;
  while (lead < s.size() && s[lead] == 1) ++lead;  // leading 1s broadcast like missing dims
  const size_t k = s.size() - lead;
  if (k > b.size()) return 0;
  for (size_t i = 0; i < k; ++i)
    if (s[lead + i] != b[b.size() - k + i]) return 0;
  return small.numel();
}

// out = a op b on the fast path when the layouts allow it; false when they do not.
bool binary_fast(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const int64_t n = out.numel();
  // `big` has the output's shape; `small` broadcasts into it (b_first: small is a, the left one).
  const bool b_first = a.shape() != out.shape();
  const Tensor& big = b_first ? b : a;
  const Tensor& small = b_first ? a : b;
  if (big.shape() != out.shape()) return false;
  const int64_t cols = trailing_row(small, big);
  if (cols == 0 || n == 0) return false;
  const int64_t rows = n / cols, small_rows = small.numel() / cols;
  ECH_DISPATCH_FLOATING(out.dtype(), name(op), {
    if (cols == 1 && rows > 1)  // one value against every element
      cpu::fast::binary_scalar<scalar_t>(op, big.data<scalar_t>(), small.data<scalar_t>()[0],
                                         b_first, out.data<scalar_t>(), n);
    else
      cpu::fast::binary_rows<scalar_t>(op, big.data<scalar_t>(), small.data<scalar_t>(), rows, cols,
                                       small_rows, b_first, out.data<scalar_t>());
  });
  return true;
}
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x) {
  detail::check_defined(name(op), x);
  const bool bf16 = x.dtype() == kBFloat16 && bf16_computes(op);
  if (!bf16) detail::check_floating(name(op), x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    const cudaStream_t stream = cuda::current_stream(x.device().index);
    if (bf16) {
      cuda::unary<bfloat16>(op, x.data<bfloat16>(), indexer_of(x), y.data<bfloat16>(), x.numel(),
                            stream);
      return y;
    }
    detail::check_cuda_float(name(op), x);
    cuda::unary<float>(op, x.data<float>(), indexer_of(x), y.data<float>(), x.numel(), stream);
    return y;
  }
#endif
  if (bf16) {  // the naive twin: no fast bfloat16 loops yet
    cpu::unary<bfloat16>(op, x.data<bfloat16>(), indexer_of(x), y.data<bfloat16>(), x.numel());
    return y;
  }
  if (fast_cpu(x)) {
    ECH_DISPATCH_FLOATING(
        x.dtype(), name(op),
        cpu::fast::unary<scalar_t>(op, x.data<scalar_t>(), y.data<scalar_t>(), x.numel()));
    return y;
  }
  ECH_DISPATCH_FLOATING(
      x.dtype(), name(op),
      cpu::unary<scalar_t>(op, x.data<scalar_t>(), indexer_of(x), y.data<scalar_t>(), x.numel()));
  return y;
}

Tensor neg(const Tensor& x) {
  return unary(UnaryOp::Neg, x);
}
Tensor abs(const Tensor& x) {
  return unary(UnaryOp::Abs, x);
}
Tensor exp(const Tensor& x) {
  return unary(UnaryOp::Exp, x);
}
Tensor log(const Tensor& x) {
  return unary(UnaryOp::Log, x);
}
Tensor sqrt(const Tensor& x) {
  return unary(UnaryOp::Sqrt, x);
}
Tensor relu(const Tensor& x) {
  return unary(UnaryOp::Relu, x);
}
Tensor tanh(const Tensor& x) {
  return unary(UnaryOp::Tanh, x);
}
Tensor sigmoid(const Tensor& x) {
  return unary(UnaryOp::Sigmoid, x);
}
Tensor square(const Tensor& x) {
  return unary(UnaryOp::Square, x);
}
Tensor reciprocal(const Tensor& x) {
  return unary(UnaryOp::Reciprocal, x);
}

Tensor unary_backward(UnaryOp op, const Tensor& grad_out, const Tensor& x, const Tensor& y) {
  const std::string op_name = std::string(name(op)) + "_backward";
  const char* opn = op_name.c_str();
  for (const Tensor* t : {&grad_out, &x, &y}) {
    detail::check_defined(opn, *t);
    detail::check_same_shape(opn, grad_out, *t);
    detail::check_same_dtype(opn, grad_out, *t);
    detail::check_same_device(opn, grad_out, *t);
  }
  const bool bf16 = grad_out.dtype() == kBFloat16 && bf16_computes(op);
  if (!bf16) detail::check_floating(opn, grad_out);
  const Tensor g = grad_out.contiguous(), xc = x.contiguous(), yc = y.contiguous();
  Tensor grad_in = Tensor::empty(x.shape(), x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    const cudaStream_t stream = cuda::current_stream(x.device().index);
    if (bf16) {
      cuda::unary_backward<bfloat16>(op, g.data<bfloat16>(), xc.data<bfloat16>(),
                                     yc.data<bfloat16>(), grad_in.data<bfloat16>(), x.numel(),
                                     stream);
      return grad_in;
    }
    detail::check_cuda_float(opn, x);
    cuda::unary_backward<float>(op, g.data<float>(), xc.data<float>(), yc.data<float>(),
                                grad_in.data<float>(), x.numel(), stream);
    return grad_in;
  }
#endif
  if (bf16) {
    cpu::unary_backward<bfloat16>(op, g.data<bfloat16>(), xc.data<bfloat16>(), yc.data<bfloat16>(),
                                  grad_in.data<bfloat16>(), x.numel());
    return grad_in;
  }
  if (fast_cpu(g)) {
    ECH_DISPATCH_FLOATING(x.dtype(), opn,
                          cpu::fast::unary_backward<scalar_t>(
                              op, g.data<scalar_t>(), xc.data<scalar_t>(), yc.data<scalar_t>(),
                              grad_in.data<scalar_t>(), x.numel()));
    return grad_in;
  }
  ECH_DISPATCH_FLOATING(
      x.dtype(), opn,
      cpu::unary_backward<scalar_t>(op, g.data<scalar_t>(), xc.data<scalar_t>(),
                                    yc.data<scalar_t>(), grad_in.data<scalar_t>(), x.numel()));
  return grad_in;
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  detail::check_defined(name(op), a, "first input");
  detail::check_defined(name(op), b, "second input");
  detail::check_same_dtype(name(op), a, b);
  detail::check_same_device(name(op), a, b);
  const bool bf16 = a.dtype() == kBFloat16 && bf16_computes(op);
  if (!bf16) detail::check_floating(name(op), a);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name(op));
  Tensor out = Tensor::empty(out_shape, a.dtype(), a.device());
  const StridedIndexer a_ix = broadcast_indexer(a, out_shape),
                       b_ix = broadcast_indexer(b, out_shape);
#if ECHELON_WITH_CUDA
  if (a.is_cuda()) {
    cuda::DeviceGuard guard(a.device().index);
    const cudaStream_t stream = cuda::current_stream(a.device().index);
    if (bf16) {
      cuda::binary<bfloat16>(op, a.data<bfloat16>(), a_ix, b.data<bfloat16>(), b_ix,
                             out.data<bfloat16>(), out.numel(), stream);
      return out;
    }
    detail::check_cuda_float(name(op), a);
    cuda::binary<float>(op, a.data<float>(), a_ix, b.data<float>(), b_ix, out.data<float>(),
                        out.numel(), stream);
    return out;
  }
#endif
  if (bf16) {
    cpu::binary<bfloat16>(op, a.data<bfloat16>(), a_ix, b.data<bfloat16>(), b_ix,
                          out.data<bfloat16>(), out.numel());
    return out;
  }
  if (binary_fast(op, a, b, out)) return out;
  ECH_DISPATCH_FLOATING(a.dtype(), name(op),
                        cpu::binary<scalar_t>(op, a.data<scalar_t>(), a_ix, b.data<scalar_t>(),
                                              b_ix, out.data<scalar_t>(), out.numel()));
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Div, a, b);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Max, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Min, a, b);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::Pow, a, b);
}

Tensor binary_scalar(BinaryOp op, const Tensor& a, double s, bool scalar_first) {
  detail::check_defined(name(op), a);
  detail::check_floating(name(op), a);
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
#if ECHELON_WITH_CUDA
  if (a.is_cuda()) {
    detail::check_cuda_float(name(op), a);
    cuda::DeviceGuard guard(a.device().index);
    cuda::binary_scalar<float>(op, a.data<float>(), indexer_of(a), static_cast<float>(s),
                               scalar_first, out.data<float>(), a.numel(),
                               cuda::current_stream(a.device().index));
    return out;
  }
#endif
  if (fast_cpu(a)) {
    ECH_DISPATCH_FLOATING(
        a.dtype(), name(op),
        cpu::fast::binary_scalar<scalar_t>(op, a.data<scalar_t>(), static_cast<scalar_t>(s),
                                           scalar_first, out.data<scalar_t>(), a.numel()));
    return out;
  }
  ECH_DISPATCH_FLOATING(
      a.dtype(), name(op),
      cpu::binary_scalar<scalar_t>(op, a.data<scalar_t>(), indexer_of(a), static_cast<scalar_t>(s),
                                   scalar_first, out.data<scalar_t>(), a.numel()));
  return out;
}

Tensor add(const Tensor& a, double s) {
  return binary_scalar(BinaryOp::Add, a, s);
}
Tensor mul(const Tensor& a, double s) {
  return binary_scalar(BinaryOp::Mul, a, s);
}
Tensor pow(const Tensor& a, double s) {
  return binary_scalar(BinaryOp::Pow, a, s);
}

Tensor eq(const Tensor& a, const Tensor& b) {
  detail::check_defined("eq", a, "first input");
  detail::check_defined("eq", b, "second input");
  detail::check_same_dtype("eq", a, b);
  detail::check_same_device("eq", a, b);
  const Shape out_shape = broadcast_shapes(a.shape(), b.shape(), "eq");
  Tensor out = Tensor::empty(out_shape, kFloat32, a.device());
  const StridedIndexer a_ix = broadcast_indexer(a, out_shape),
                       b_ix = broadcast_indexer(b, out_shape);
#if ECHELON_WITH_CUDA
  if (a.is_cuda()) {
    cuda::DeviceGuard guard(a.device().index);
    cudaStream_t stream = cuda::current_stream(a.device().index);
    ECH_DISPATCH_CUDA_ALL(a.dtype(), "eq",
                          cuda::eq<scalar_t>(a.data<scalar_t>(), a_ix, b.data<scalar_t>(), b_ix,
                                             out.data<float>(), out.numel(), stream));
    return out;
  }
#endif
  ECH_DISPATCH_ALL(a.dtype(), "eq",
                   cpu::eq<scalar_t>(a.data<scalar_t>(), a_ix, b.data<scalar_t>(), b_ix,
                                     out.data<float>(), out.numel()));
  return out;
}

void fill_(Tensor& t, double value) {
  detail::check_defined("fill_", t);
  if (t.dtype() == kBFloat16) {  // storage only: the value rounded once, as a cast would
    copy_(t, Tensor::scalar(value, kFloat32, t.device()));
    return;
  }
  const StridedIndexer ix = indexer_of(t);
#if ECHELON_WITH_CUDA
  if (t.is_cuda()) {
    cuda::DeviceGuard guard(t.device().index);
    cudaStream_t stream = cuda::current_stream(t.device().index);
    ECH_DISPATCH_CUDA_ALL(t.dtype(), "fill_",
                          cuda::fill<scalar_t>(t.data<scalar_t>(), ix, static_cast<scalar_t>(value),
                                               t.numel(), stream));
    return;
  }
#endif
  if (fast_cpu(t)) {
    ECH_DISPATCH_ALL(
        t.dtype(), "fill_",
        cpu::fast::fill<scalar_t>(t.data<scalar_t>(), static_cast<scalar_t>(value), t.numel()));
    return;
  }
  ECH_DISPATCH_ALL(
      t.dtype(), "fill_",
      cpu::fill<scalar_t>(t.data<scalar_t>(), ix, static_cast<scalar_t>(value), t.numel()));
}

Tensor arange(int64_t n, DType dtype, Device device) {
  ECH_CHECK(n >= 0, "arange: n must be >= 0, got ", n);
  ECH_CHECK(dtype != kUInt8, "arange: uint8 is not supported (values would wrap)");
  Tensor out = Tensor::empty({n}, dtype, device);
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    cuda::DeviceGuard guard(device.index);
    cudaStream_t stream = cuda::current_stream(device.index);
    switch (dtype) {  // uint8 was rejected above and has no CUDA instantiation
      case kFloat32:
        cuda::arange<float>(out.data<float>(), n, stream);
        break;
      case kInt32:
        cuda::arange<int32_t>(out.data<int32_t>(), n, stream);
        break;
      case kInt64:
        cuda::arange<int64_t>(out.data<int64_t>(), n, stream);
        break;
      default:
        ECH_FAIL("arange: dtype ", dtype_name(dtype), " is not supported on CUDA");
    }
    return out;
  }
#endif
  switch (dtype) {  // no uint8 instantiation: rejected above
    case kFloat32:
      cpu::arange<float>(out.data<float>(), n);
      break;
    case kFloat64:
      cpu::arange<double>(out.data<double>(), n);
      break;
    case kInt32:
      cpu::arange<int32_t>(out.data<int32_t>(), n);
      break;
    default:
      cpu::arange<int64_t>(out.data<int64_t>(), n);
  }
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined("cast", x);
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  copy_(out, x);
  return out;
}

namespace {
// No stride-0 dim longer than 1 (an expanded view would have several threads write one element).
bool writes_each_element_once(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1 && t.stride(d) == 0) return false;
  return true;
}

void copy_same_device(Tensor& dst, const Tensor& src);

// bfloat16 on either side (a storage dtype: cast and copied only): one element at a time, the
// naive twin; on CUDA the float32 <-> bfloat16 kernels, any other pair through a float32 copy
// (the same value: cast_value takes every dtype to bfloat16 through float).
void copy_with_bfloat16(Tensor& dst, const Tensor& src) {
  const StridedIndexer dst_ix = indexer_of(dst);
  const StridedIndexer src_ix = broadcast_indexer(src, dst.shape());
  const int64_t n = dst.numel();
#if ECHELON_WITH_CUDA
  if (dst.is_cuda()) {
    const auto direct = [](DType d) { return d == kBFloat16 || d == kFloat32; };
    if (!direct(src.dtype()) || !direct(dst.dtype())) {
      const Tensor through = cast(src, kFloat32);
      copy_same_device(dst, through);
      return;
    }
    cuda::DeviceGuard guard(dst.device().index);
    cudaStream_t stream = cuda::current_stream(dst.device().index);
    if (src.dtype() == kFloat32) {
      cuda::copy_cast<float, bfloat16>(src.data<float>(), src_ix, dst.data<bfloat16>(), dst_ix, n,
                                       stream);
    } else if (dst.dtype() == kFloat32) {
      cuda::copy_cast<bfloat16, float>(src.data<bfloat16>(), src_ix, dst.data<float>(), dst_ix, n,
                                       stream);
    } else {
      cuda::copy_cast<bfloat16, bfloat16>(src.data<bfloat16>(), src_ix, dst.data<bfloat16>(),
                                          dst_ix, n, stream);
    }
    return;
  }
#endif
  if (src.dtype() == kBFloat16 && dst.dtype() == kBFloat16) {
    cpu::copy_cast<bfloat16, bfloat16>(src.data<bfloat16>(), src_ix, dst.data<bfloat16>(), dst_ix,
                                       n);
  } else if (src.dtype() == kBFloat16) {
    ECH_DISPATCH_ALL(dst.dtype(), "copy_",
                     cpu::copy_cast<bfloat16, scalar_t>(src.data<bfloat16>(), src_ix,
                                                        dst.data<scalar_t>(), dst_ix, n));
  } else {
    ECH_DISPATCH_ALL(src.dtype(), "copy_",
                     cpu::copy_cast<scalar_t, bfloat16>(src.data<scalar_t>(), src_ix,
                                                        dst.data<bfloat16>(), dst_ix, n));
  }
}

// dst[dst_ix(i)] = src[src_ix(i)] with both on one device; double dispatch over the dtypes.
void copy_same_device(Tensor& dst, const Tensor& src) {
  if (dst.dtype() == kBFloat16 || src.dtype() == kBFloat16) {
    copy_with_bfloat16(dst, src);
    return;
  }
  if (fast_cpu(dst) && fast_cpu(src) && dst.dtype() == src.dtype() &&
      dst.shape() == src.shape()) {  // a plain copy of bytes (clone, contiguous)
    ECH_DISPATCH_ALL(
        dst.dtype(), "copy_",
        cpu::fast::copy<scalar_t>(src.data<scalar_t>(), dst.data<scalar_t>(), dst.numel()));
    return;
  }
  if (!dst.is_cuda() && !src.is_cuda() && cpu_kernels() == CpuKernels::Fast &&
      dst.dtype() == src.dtype() && dst.shape() == src.shape() && dst.dim() <= kMaxDims &&
      writes_each_element_once(dst)) {  // a view copy (the option-A shortcut, a transpose)
    ECH_DISPATCH_ALL(dst.dtype(), "copy_",
                     cpu::fast::copy_strided<scalar_t>(
                         src.data<scalar_t>(), src.strides().data(), dst.data<scalar_t>(),
                         dst.strides().data(), dst.shape().data(), static_cast<int>(dst.dim())));
    return;
  }
  const StridedIndexer dst_ix = indexer_of(dst);
  const StridedIndexer src_ix = broadcast_indexer(src, dst.shape());
  const int64_t n = dst.numel();
#if ECHELON_WITH_CUDA
  if (dst.is_cuda()) {
    cuda::DeviceGuard guard(dst.device().index);
    cudaStream_t stream = cuda::current_stream(dst.device().index);
    // float64 has no CUDA kernels; a plain copy of its bytes needs none (SGD's device rate).
    if (dst.dtype() == kFloat64 && src.dtype() == kFloat64 && dst.is_contiguous() &&
        src.is_contiguous() && dst.shape() == src.shape()) {
      ECH_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), dst.nbytes(),
                                     cudaMemcpyDeviceToDevice, stream));
      return;
    }
    ECH_DISPATCH_CUDA_ALL(
        src.dtype(), "copy_", using src_t = scalar_t; ECH_DISPATCH_CUDA_ALL(
            dst.dtype(), "copy_",
            cuda::copy_cast<src_t, scalar_t>(src.data<src_t>(), src_ix, dst.data<scalar_t>(),
                                             dst_ix, n, stream)));
    return;
  }
#endif
  ECH_DISPATCH_ALL(src.dtype(), "copy_", using src_t = scalar_t; ECH_DISPATCH_ALL(
                       dst.dtype(), "copy_",
                       cpu::copy_cast<src_t, scalar_t>(src.data<src_t>(), src_ix,
                                                       dst.data<scalar_t>(), dst_ix, n)));
}
}  // namespace

void copy_(Tensor& dst, const Tensor& src) {
  detail::check_defined("copy_", dst, "destination");
  detail::check_defined("copy_", src, "source");
  ECH_CHECK(broadcast_shapes(src.shape(), dst.shape(), "copy_") == dst.shape(),
            "copy_: source shape ", src.shape(), " cannot be broadcast to destination shape ",
            dst.shape());
  if (src.device() == dst.device()) {
    copy_same_device(dst, src);
    return;
  }
  // Across devices: move the bytes with the source's dtype, then cast/scatter on dst's device.
  const Tensor moved = src.contiguous().to(dst.device());
  copy_same_device(dst, moved);
}

void add_row_bias_(Tensor& y, const Tensor& bias, bool relu) {
  constexpr const char* op = "add_row_bias_";
  detail::check_defined(op, y, "output");
  detail::check_defined(op, bias, "bias");
  detail::check_same_dtype(op, y, bias);
  detail::check_same_device(op, y, bias);
  detail::check_floating(op, y);
  ECH_CHECK(y.dim() == 2 && bias.shape() == Shape{y.size(1)} && y.is_contiguous(),
            "add_row_bias_: expected a contiguous y (N, F) and a bias (F), got ", y.describe(),
            " and ", bias.shape());
  const Tensor b = bias.contiguous();
  const int64_t rows = y.size(0), features = y.size(1);
#if ECHELON_WITH_CUDA
  if (y.is_cuda()) {
    detail::check_cuda_float(op, y);
    cuda::DeviceGuard guard(y.device().index);
    cuda::add_row_bias(y.data<float>(), b.data<float>(), rows, features, relu,
                       cuda::current_stream(y.device().index));
    return;
  }
#endif
  ECH_DISPATCH_FLOATING(
      y.dtype(), op,
      cpu::add_row_bias<scalar_t>(y.data<scalar_t>(), b.data<scalar_t>(), rows, features, relu));
}

void axpy_(Tensor& dst, const Tensor& src, double alpha) {
  detail::check_defined("axpy_", dst, "destination");
  detail::check_defined("axpy_", src, "source");
  detail::check_same_shape("axpy_", dst, src);
  detail::check_same_dtype("axpy_", dst, src);
  detail::check_same_device("axpy_", dst, src);
  detail::check_floating("axpy_", dst);
  ECH_CHECK(dst.is_contiguous(), "axpy_: destination ", dst.describe(), " must be contiguous");
  const Tensor s = src.contiguous();
#if ECHELON_WITH_CUDA
  if (dst.is_cuda()) {
    detail::check_cuda_float("axpy_", dst);
    cuda::DeviceGuard guard(dst.device().index);
    cuda::axpy<float>(dst.data<float>(), s.data<float>(), static_cast<float>(alpha), dst.numel(),
                      cuda::current_stream(dst.device().index));
    return;
  }
#endif
  if (fast_cpu(dst)) {
    ECH_DISPATCH_FLOATING(dst.dtype(), "axpy_",
                          cpu::fast::axpy<scalar_t>(dst.data<scalar_t>(), s.data<scalar_t>(),
                                                    static_cast<scalar_t>(alpha), dst.numel()));
    return;
  }
  ECH_DISPATCH_FLOATING(dst.dtype(), "axpy_",
                        cpu::axpy<scalar_t>(dst.data<scalar_t>(), s.data<scalar_t>(),
                                            static_cast<scalar_t>(alpha), dst.numel()));
}

Tensor clamp(const Tensor& x, double lo, double hi) {
  detail::check_defined("clamp", x);
  detail::check_floating("clamp", x);
  ECH_CHECK(lo <= hi, "clamp: lo ", lo, " is greater than hi ", hi);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("clamp", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::clamp<float>(xc.data<float>(), y.data<float>(), static_cast<float>(lo),
                       static_cast<float>(hi), x.numel(), cuda::current_stream(x.device().index));
    return y;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), "clamp",
      cpu::clamp<scalar_t>(xc.data<scalar_t>(), y.data<scalar_t>(), static_cast<scalar_t>(lo),
                           static_cast<scalar_t>(hi), x.numel()));
  return y;
}

bool all_finite(const Tensor& x) {
  detail::check_defined("all_finite", x);
  if (x.dtype() == kBFloat16) return all_finite(cast(x, kFloat32));  // exactly the same values
  if (!is_floating(x.dtype())) return true;                          // integers are always finite
  const Tensor xc = x.contiguous();
  Tensor count = Tensor::empty({}, kInt64, x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("all_finite", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::count_nonfinite<float>(xc.data<float>(), x.numel(), count.data<int64_t>(),
                                 cuda::current_stream(x.device().index));
    return count.item<int64_t>() == 0;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), "all_finite",
      cpu::count_nonfinite<scalar_t>(xc.data<scalar_t>(), x.numel(), count.data<int64_t>()));
  return count.item<int64_t>() == 0;
}

}  // namespace echelon::ops
