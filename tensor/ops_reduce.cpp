// Dispatch for the reduce family. A reduction over any set of dims is brought to the kernels'
// (outer, inner) form by permuting the reduced dims to the end: a view, never a copy.
#include <algorithm>
#include <limits>

#include <echelon/tensor/cpu/fast/elementwise.h>
#include <echelon/tensor/cpu/reduce.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/reduce.h>
#endif

namespace echelon::ops {
namespace {

// The (outer, inner) form of a reduction and the shape of its result.
struct ReducePlan {
  Tensor permuted;  // kept dims first, reduced dims last
  int64_t outer = 1, inner = 1;
  Shape out_shape;
  bool leading = false;  // the reduced dims are dims 0..k-1 (k >= 1), some dim kept
};

ReducePlan plan_reduction(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                          const char* op) {
  const int64_t rank = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(rank), dims.empty());
  for (int64_t d : dims) {
    ECH_CHECK(rank > 0 || d == 0 || d == -1, op, ": dim ", d, " is out of range for a scalar");
    if (rank == 0) continue;
    const int64_t w = wrap_dim(d, rank, op);
    ECH_CHECK(!reduced[w], op, ": dim ", d, " appears twice in ", dims, " (shape ", x.shape(), ")");
    reduced[w] = true;
  }
  ReducePlan plan;
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) continue;
    order.push_back(d);
    plan.outer *= x.shape()[d];
    plan.out_shape.push_back(x.shape()[d]);
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) continue;
    order.push_back(d);
    plan.inner *= x.shape()[d];
  }
  const auto kept = static_cast<int64_t>(plan.out_shape.size());
  plan.leading =
      kept > 0 && kept < rank &&
      std::all_of(reduced.begin(), reduced.begin() + (rank - kept), [](bool r) { return r; });
  if (keepdim) {
    plan.out_shape = x.shape();
    for (int64_t d = 0; d < rank; ++d)
      if (reduced[d]) plan.out_shape[d] = 1;
  }
  plan.permuted = x.permute(order);
  return plan;
}

// softmax's (outer, dim_size, inner) view of a contiguous tensor.
struct SoftmaxPlan {
  int64_t outer = 1, dim_size = 1, inner = 1;
};

SoftmaxPlan plan_softmax(const Tensor& x, int64_t dim, const char* op) {
  SoftmaxPlan plan;
  if (x.dim() == 0) return plan;
  const int64_t d = wrap_dim(dim, x.dim(), op);
  for (int64_t i = 0; i < d; ++i) plan.outer *= x.shape()[i];
  plan.dim_size = x.shape()[d];
  for (int64_t i = d + 1; i < x.dim(); ++i) plan.inner *= x.shape()[i];
  return plan;
}

enum class SoftmaxKind { Softmax, LogSoftmax };

Tensor softmax_forward(const Tensor& x, int64_t dim, SoftmaxKind kind, const char* op) {
  detail::check_defined(op, x);
  detail::check_floating(op, x);
  const SoftmaxPlan p = plan_softmax(x, dim, op);
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const bool log = kind == SoftmaxKind::LogSoftmax;
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float(op, x);
    cuda::DeviceGuard guard(x.device().index);
    cudaStream_t stream = cuda::current_stream(x.device().index);
    if (log)
      cuda::log_softmax<float>(xc.data<float>(), y.data<float>(), p.outer, p.dim_size, p.inner,
                               stream);
    else
      cuda::softmax<float>(xc.data<float>(), y.data<float>(), p.outer, p.dim_size, p.inner, stream);
    return y;
  }
#endif
  ECH_DISPATCH_FLOATING(x.dtype(), op,
                        if (log) cpu::log_softmax<scalar_t>(xc.data<scalar_t>(), y.data<scalar_t>(),
                                                            p.outer, p.dim_size, p.inner);
                        else cpu::softmax<scalar_t>(xc.data<scalar_t>(), y.data<scalar_t>(),
                                                    p.outer, p.dim_size, p.inner));
  return y;
}

Tensor softmax_backward_impl(const Tensor& grad_out, const Tensor& y, int64_t dim, SoftmaxKind kind,
                             const char* op) {
  detail::check_defined(op, grad_out, "grad_out");
  detail::check_defined(op, y, "y");
  detail::check_same_shape(op, grad_out, y);
  detail::check_same_dtype(op, grad_out, y);
  detail::check_same_device(op, grad_out, y);
  detail::check_floating(op, y);
  const SoftmaxPlan p = plan_softmax(y, dim, op);
  const Tensor g = grad_out.contiguous(), yc = y.contiguous();
  Tensor grad_in = Tensor::empty(y.shape(), y.dtype(), y.device());
  const bool log = kind == SoftmaxKind::LogSoftmax;
#if ECHELON_WITH_CUDA
  if (y.is_cuda()) {
    detail::check_cuda_float(op, y);
    cuda::DeviceGuard guard(y.device().index);
    cudaStream_t stream = cuda::current_stream(y.device().index);
    if (log)
      cuda::log_softmax_backward<float>(g.data<float>(), yc.data<float>(), grad_in.data<float>(),
                                        p.outer, p.dim_size, p.inner, stream);
    else
      cuda::softmax_backward<float>(g.data<float>(), yc.data<float>(), grad_in.data<float>(),
                                    p.outer, p.dim_size, p.inner, stream);
    return grad_in;
  }
#endif
  ECH_DISPATCH_FLOATING(
      y.dtype(), op,
      if (log) cpu::log_softmax_backward<scalar_t>(g.data<scalar_t>(), yc.data<scalar_t>(),
                                                   grad_in.data<scalar_t>(), p.outer, p.dim_size,
                                                   p.inner);
      else cpu::softmax_backward<scalar_t>(g.data<scalar_t>(), yc.data<scalar_t>(),
                                           grad_in.data<scalar_t>(), p.outer, p.dim_size, p.inner));
  return grad_in;
}

}  // namespace

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  detail::check_defined(name(op), x);
  detail::check_floating(name(op), x);
  const ReducePlan p = plan_reduction(x, dims, keepdim, name(op));
  Tensor out = Tensor::empty(p.out_shape, x.dtype(), x.device());
  if (p.outer == 0) return out;
  if (p.inner == 0) {
    // An empty reduction: the sum is 0, the mean 0/0; max/min have no answer.
    ECH_CHECK(op == ReduceOp::Sum || op == ReduceOp::Mean, name(op),
              ": cannot reduce over an empty dim (shape ", x.shape(), ")");
    fill_(out, op == ReduceOp::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    return out;
  }
  const StridedIndexer ix = detail::indexer_of(p.permuted);
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float(name(op), x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::reduce<float>(op, x.data<float>(), ix, out.data<float>(), p.outer, p.inner,
                        cuda::current_stream(x.device().index));
    return out;
  }
#endif
  if (p.leading && (op == ReduceOp::Sum || op == ReduceOp::Mean) && x.is_contiguous() &&
      cpu_kernels() == CpuKernels::Fast) {  // column sums of a (inner, outer) matrix: a bias grad
    ECH_DISPATCH_FLOATING(
        x.dtype(), name(op),
        cpu::fast::sum_rows<scalar_t>(x.data<scalar_t>(), p.inner, p.outer, op == ReduceOp::Mean,
                                      out.data<scalar_t>()));
    return out;
  }
  if (p.permuted.is_contiguous() && (op == ReduceOp::Sum || op == ReduceOp::Mean) &&
      cpu_kernels() == CpuKernels::Fast) {  // row sums: trailing dims (global average pooling)
    ECH_DISPATCH_FLOATING(
        x.dtype(), name(op),
        cpu::fast::sum_inner<scalar_t>(p.permuted.data<scalar_t>(), p.outer, p.inner,
                                       op == ReduceOp::Mean, out.data<scalar_t>()));
    return out;
  }
  ECH_DISPATCH_FLOATING(
      x.dtype(), name(op),
      cpu::reduce<scalar_t>(op, x.data<scalar_t>(), ix, out.data<scalar_t>(), p.outer, p.inner));
  return out;
}

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReduceOp::Sum, x, dims, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReduceOp::Mean, x, dims, keepdim);
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReduceOp::Max, x, dims, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  detail::check_defined("argmax", x);
  detail::check_floating("argmax", x);
  const ReducePlan p = plan_reduction(x, {dim}, keepdim, "argmax");
  ECH_CHECK(p.inner > 0, "argmax: cannot take argmax over an empty dim (shape ", x.shape(), ")");
  Tensor out = Tensor::empty(p.out_shape, kInt64, x.device());
  if (p.outer == 0) return out;
  const StridedIndexer ix = detail::indexer_of(p.permuted);
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("argmax", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::argmax<float>(x.data<float>(), ix, out.data<int64_t>(), p.outer, p.inner,
                        cuda::current_stream(x.device().index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), "argmax",
      cpu::argmax<scalar_t>(x.data<scalar_t>(), ix, out.data<int64_t>(), p.outer, p.inner));
  return out;
}

MaskedColumnSums relu_backward_column_sums(const Tensor& grad_out, const Tensor& relu_out) {
  constexpr const char* op = "relu_backward_column_sums";
  detail::check_defined(op, grad_out, "gradient");
  detail::check_defined(op, relu_out, "ReLU output");
  detail::check_same_shape(op, grad_out, relu_out);
  detail::check_same_dtype(op, grad_out, relu_out);
  detail::check_same_device(op, grad_out, relu_out);
  detail::check_floating(op, grad_out);
  ECH_CHECK(grad_out.dim() == 2, "relu_backward_column_sums: expected (N, F), got ",
            grad_out.shape());
#if ECHELON_WITH_CUDA
  if (grad_out.is_cuda()) {
    detail::check_cuda_float(op, grad_out);
    const Tensor g = grad_out.contiguous(), y = relu_out.contiguous();
    MaskedColumnSums out{Tensor::empty(g.shape(), g.dtype(), g.device()),
                         Tensor::empty({g.size(1)}, g.dtype(), g.device())};
    cuda::DeviceGuard guard(g.device().index);
    cuda::relu_backward_column_sums(g.data<float>(), y.data<float>(), out.masked.data<float>(),
                                    out.sums.data<float>(), g.size(0), g.size(1),
                                    cuda::current_stream(g.device().index));
    return out;
  }
#endif
  Tensor masked = unary_backward(UnaryOp::Relu, grad_out, relu_out, relu_out);
  Tensor sums = sum(masked, {0});
  return {std::move(masked), std::move(sums)};
}

}  // namespace echelon::ops

namespace echelon::detail {

void check_step_statistics(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& guard, const Tensor& correct) {
  constexpr const char* op = "step_statistics";
  detail::check_floating(op, logits);
  ECH_CHECK(logits.dim() == 2 && logits.size(1) >= 1 && targets.dim() == 1 &&
                targets.size(0) == logits.size(0) && targets.dtype() == kInt64,
            "step_statistics: expected logits (N, C >= 1) and int64 targets (N), got ",
            logits.shape(), " and ", targets.shape(), " ", dtype_name(targets.dtype()));
  for (const Tensor* scalar : std::initializer_list<const Tensor*>{&loss, &guard, &correct}) {
    ECH_CHECK(scalar->numel() == 1 && scalar->dtype() == logits.dtype() && scalar->is_contiguous(),
              "step_statistics: loss, guard and correct must be one-element tensors of the "
              "logits' dtype, got ",
              scalar->shape(), " ", dtype_name(scalar->dtype()));
    detail::check_same_device(op, logits, *scalar);
  }
  detail::check_same_device(op, logits, targets);
}

}  // namespace echelon::detail

namespace echelon::ops {

void step_statistics(const Tensor& logits, const Tensor& targets, const Tensor& loss, Tensor& guard,
                     Tensor& correct) {
  constexpr const char* op = "step_statistics";
  detail::check_step_statistics(logits, targets, loss, guard, correct);
  const Tensor x = logits.contiguous(), t = targets.contiguous();
  const int64_t n = x.size(0), classes = x.size(1);
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float(op, x);
    cuda::DeviceGuard guard_device(x.device().index);
    cuda::step_statistics(x.data<float>(), t.data<int64_t>(), n, classes, loss.data<float>(),
                          guard.data<float>(), correct.data<float>(),
                          cuda::current_stream(x.device().index));
    return;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), op,
      cpu::step_statistics<scalar_t>(x.data<scalar_t>(), t.data<int64_t>(), n, classes,
                                     loss.data<scalar_t>(), guard.data<scalar_t>(),
                                     correct.data<scalar_t>()));
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  detail::check_defined("sum_to", x);
  if (x.shape() == shape) return x;
  ECH_CHECK(broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(), "sum_to: shape ", shape,
            " does not broadcast to the tensor's shape ", x.shape());
  // Sum the leading dims x has extra, and the dims where the target has size 1.
  const int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) dims.push_back(d);
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, /*keepdim=*/true).reshape(shape);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_forward(x, dim, SoftmaxKind::Softmax, "softmax");
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_forward(x, dim, SoftmaxKind::LogSoftmax, "log_softmax");
}
Tensor softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(grad_out, y, dim, SoftmaxKind::Softmax, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(grad_out, y, dim, SoftmaxKind::LogSoftmax, "log_softmax_backward");
}

}  // namespace echelon::ops
