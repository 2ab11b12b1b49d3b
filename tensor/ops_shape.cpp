// Dispatch for the shape family: materialised permutes, concat, the index ops and the option-A
// shortcut. Index values are checked before any kernel runs, so a bad label throws naming it
// instead of reading out of bounds.
#include <algorithm>
#include <climits>

#include <echelon/tensor/cpu/shape.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/shape.h>
#endif

namespace echelon::ops {
namespace {

// Throws naming `op` and the first offending value when any index is outside [0, size).
void check_index_range(const char* op, const Tensor& index, int64_t size, const char* what) {
  const Tensor idx = index.contiguous();
  Tensor result = Tensor::empty({2}, kInt64, index.device());  // (count, first_bad)
#if ECHELON_WITH_CUDA
  if (index.is_cuda()) {
    cuda::DeviceGuard guard(index.device().index);
    int64_t* r = result.data<int64_t>();
    cuda::count_out_of_range(idx.data<int64_t>(), idx.numel(), size, r, r + 1,
                             cuda::current_stream(index.device().index));
  } else
#endif
  {
    int64_t* r = result.data<int64_t>();
    cpu::count_out_of_range(idx.data<int64_t>(), idx.numel(), size, r, r + 1);
  }
  const std::vector<int64_t> host = result.to_vector<int64_t>();
  ECH_CHECK(host[0] == 0, op, ": ", what, " ", host[1], " is out of range [0, ", size, ") (",
            host[0], " bad of ", idx.numel(), ")");
}

// (outer, dim_size, inner) around dim `d` of `shape`.
void split_at(const Shape& shape, int64_t d, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t i = 0; i < d; ++i) *outer *= shape[i];
  for (size_t i = static_cast<size_t>(d) + 1; i < shape.size(); ++i) *inner *= shape[i];
}

Tensor materialise(const Tensor& view) {
  Tensor out = Tensor::empty(view.shape(), view.dtype(), view.device());
  copy_(out, view);
  return out;
}

}  // namespace

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", x);
  return materialise(x.permute(dims));
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  detail::check_defined("transpose", x);
  return materialise(x.transpose(dim0, dim1));
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  ECH_CHECK(!xs.empty(), "concat: no tensors given");
  const Tensor& first = xs.front();
  detail::check_defined("concat", first);
  ECH_CHECK(first.dim() > 0, "concat: cannot concatenate scalars");
  const int64_t d = wrap_dim(dim, first.dim(), "concat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    detail::check_defined("concat", x);
    detail::check_same_dtype("concat", first, x);
    detail::check_same_device("concat", first, x);
    bool compatible = x.dim() == first.dim();
    for (int64_t k = 0; compatible && k < x.dim(); ++k)
      compatible = k == d || x.shape()[k] == first.shape()[k];
    ECH_CHECK(compatible, "concat: tensor ", i, " has shape ", x.shape(), ", incompatible with ",
              first.shape(), " along dim ", d);
    out_shape[d] += x.shape()[d];
  }
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t start = 0;
  for (const Tensor& x : xs) {
    Tensor part = out.narrow(d, start, x.shape()[d]);
    copy_(part, x);
    start += x.shape()[d];
  }
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x);
  detail::check_defined("index_select", index, "index");
  detail::check_dtype("index_select", index, kInt64, "index");
  detail::check_same_device("index_select", x, index);
  ECH_CHECK(index.dim() == 1, "index_select: index must be 1-D, got shape ", index.shape());
  ECH_CHECK(x.dim() > 0, "index_select: cannot index a scalar");
  ECH_CHECK(is_floating(x.dtype()) || x.dtype() == kInt64,
            "index_select: x must be float32, float64 or int64, got ", x.describe());
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  check_index_range("index_select", index, x.shape()[d], "index");
  int64_t outer, inner;
  split_at(x.shape(), d, &outer, &inner);
  const int64_t num = index.numel();
  Shape out_shape = x.shape();
  out_shape[d] = num;
  const Tensor xc = x.contiguous(), idx = index.contiguous();
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    cuda::DeviceGuard guard(x.device().index);
    cudaStream_t stream = cuda::current_stream(x.device().index);
    if (x.dtype() == kInt64)
      cuda::index_select<int64_t>(xc.data<int64_t>(), idx.data<int64_t>(), out.data<int64_t>(),
                                  outer, x.shape()[d], inner, num, stream);
    else {
      detail::check_cuda_float("index_select", x);
      cuda::index_select<float>(xc.data<float>(), idx.data<int64_t>(), out.data<float>(), outer,
                                x.shape()[d], inner, num, stream);
    }
    return out;
  }
#endif
  switch (x.dtype()) {
    case kFloat32:
      cpu::index_select<float>(xc.data<float>(), idx.data<int64_t>(), out.data<float>(), outer,
                               x.shape()[d], inner, num);
      break;
    case kFloat64:
      cpu::index_select<double>(xc.data<double>(), idx.data<int64_t>(), out.data<double>(), outer,
                                x.shape()[d], inner, num);
      break;
    default:
      cpu::index_select<int64_t>(xc.data<int64_t>(), idx.data<int64_t>(), out.data<int64_t>(),
                                 outer, x.shape()[d], inner, num);
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("gather", x);
  detail::check_defined("gather", index, "index");
  detail::check_dtype("gather", index, kInt64, "index");
  detail::check_same_device("gather", x, index);
  detail::check_floating("gather", x);
  ECH_CHECK(x.dim() > 0 && index.dim() == x.dim(), "gather: index shape ", index.shape(),
            " must have the rank of x's shape ", x.shape());
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  for (int64_t k = 0; k < x.dim(); ++k)
    ECH_CHECK(k == d || index.shape()[k] == x.shape()[k], "gather: index shape ", index.shape(),
              " and x shape ", x.shape(), " differ in dim ", k, " (only dim ", d, " may differ)");
  check_index_range("gather", index, x.shape()[d], "index");
  int64_t outer, inner;
  split_at(x.shape(), d, &outer, &inner);
  const Tensor xc = x.contiguous(), idx = index.contiguous();
  Tensor out = Tensor::empty(index.shape(), x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("gather", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::gather<float>(xc.data<float>(), idx.data<int64_t>(), out.data<float>(), outer,
                        x.shape()[d], inner, index.shape()[d],
                        cuda::current_stream(x.device().index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), "gather",
      cpu::gather<scalar_t>(xc.data<scalar_t>(), idx.data<int64_t>(), out.data<scalar_t>(), outer,
                            x.shape()[d], inner, index.shape()[d]));
  return out;
}

namespace {

// Checks the option-A shortcut's arguments: x_shape (N, C, H, W), pad >= 0, stride >= 1, and the
// kernels' 32-bit plane and channel indices.
void check_pad_subsample(const char* op, const Shape& x_shape, int64_t pad, int64_t stride) {
  ECH_CHECK(x_shape.size() == 4, op, ": expected an (N, C, H, W) input, got shape ", x_shape);
  ECH_CHECK(pad >= 0 && stride >= 1, op, ": pad must be >= 0 and stride >= 1, got pad ", pad,
            ", stride ", stride);
  ECH_CHECK(pad <= INT_MAX && x_shape[1] + 2 * pad <= INT_MAX &&
                x_shape[2] * x_shape[3] <= INT_MAX && stride <= INT_MAX,
            op, ": ", x_shape, " with pad ", pad, " is too large (32-bit planes and channels)");
}

Shape padded_subsampled(const Shape& x_shape, int64_t pad, int64_t stride) {
  return {x_shape[0], x_shape[1] + 2 * pad, (x_shape[2] + stride - 1) / stride,
          (x_shape[3] + stride - 1) / stride};
}

}  // namespace

Tensor pad_channels_subsample(const Tensor& x, int64_t pad, int64_t stride) {
  detail::check_defined("pad_channels_subsample", x);
  detail::check_floating("pad_channels_subsample", x);
  check_pad_subsample("pad_channels_subsample", x.shape(), pad, stride);
  const Shape& s = x.shape();
  const Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(padded_subsampled(s, pad, stride), x.dtype(), x.device());
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("pad_channels_subsample", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::pad_channels_subsample(xc.data<float>(), y.data<float>(), s[0], s[1], s[2], s[3], pad,
                                 stride, cuda::current_stream(x.device().index));
    return y;
  }
#endif
  ECH_DISPATCH_FLOATING(
      x.dtype(), "pad_channels_subsample",
      cpu::pad_channels_subsample<scalar_t>(xc.data<scalar_t>(), y.data<scalar_t>(), s[0], s[1],
                                            s[2], s[3], pad, stride));
  return y;
}

Tensor pad_channels_subsample_backward(const Tensor& g, int64_t pad, int64_t stride,
                                       const Shape& x_shape) {
  detail::check_defined("pad_channels_subsample_backward", g, "grad");
  detail::check_floating("pad_channels_subsample_backward", g);
  check_pad_subsample("pad_channels_subsample_backward", x_shape, pad, stride);
  ECH_CHECK(g.shape() == padded_subsampled(x_shape, pad, stride),
            "pad_channels_subsample_backward: grad shape ", g.shape(), " does not match input ",
            x_shape, " with pad ", pad, " and stride ", stride, " (expected ",
            padded_subsampled(x_shape, pad, stride), ")");
  const Shape& s = x_shape;
  const Tensor gc = g.contiguous();
  Tensor gx = Tensor::empty(x_shape, g.dtype(), g.device());
#if ECHELON_WITH_CUDA
  if (g.is_cuda()) {
    detail::check_cuda_float("pad_channels_subsample_backward", g);
    cuda::DeviceGuard guard(g.device().index);
    cuda::pad_channels_subsample_backward(gc.data<float>(), gx.data<float>(), s[0], s[1], s[2],
                                          s[3], pad, stride,
                                          cuda::current_stream(g.device().index));
    return gx;
  }
#endif
  ECH_DISPATCH_FLOATING(
      g.dtype(), "pad_channels_subsample_backward",
      cpu::pad_channels_subsample_backward<scalar_t>(gc.data<scalar_t>(), gx.data<scalar_t>(), s[0],
                                                     s[1], s[2], s[3], pad, stride));
  return gx;
}

Tensor one_hot(const Tensor& labels, int64_t num_classes, DType dtype) {
  detail::check_defined("one_hot", labels, "labels");
  detail::check_dtype("one_hot", labels, kInt64, "labels");
  ECH_CHECK(num_classes > 0, "one_hot: num_classes must be positive, got ", num_classes);
  ECH_CHECK(is_floating(dtype), "one_hot: dtype must be float32 or float64, got ",
            dtype_name(dtype));
  check_index_range("one_hot", labels, num_classes, "label");
  Shape out_shape = labels.shape();
  out_shape.push_back(num_classes);
  const Tensor lc = labels.contiguous();
  Tensor out = Tensor::empty(out_shape, dtype, labels.device());
#if ECHELON_WITH_CUDA
  if (labels.is_cuda()) {
    detail::check_cuda_float("one_hot", out);
    cuda::DeviceGuard guard(labels.device().index);
    cuda::one_hot<float>(lc.data<int64_t>(), out.data<float>(), lc.numel(), num_classes,
                         cuda::current_stream(labels.device().index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(
      dtype, "one_hot",
      cpu::one_hot<scalar_t>(lc.data<int64_t>(), out.data<scalar_t>(), lc.numel(), num_classes));
  return out;
}

Tensor augment_gather(const Tensor& images, const Tensor& plan, int64_t pad,
                      const std::vector<float>& scale, const std::vector<float>& shift,
                      bool plan_checked) {
  detail::check_defined("augment_gather", images, "images");
  detail::check_defined("augment_gather", plan, "plan");
  detail::check_dtype("augment_gather", images, kUInt8, "images");
  detail::check_dtype("augment_gather", plan, kInt32, "plan");
  detail::check_same_device("augment_gather", images, plan);
  ECH_CHECK(images.dim() == 4, "augment_gather: images must be (N, C, H, W), got shape ",
            images.shape());
  ECH_CHECK(plan.dim() == 2 && plan.shape()[1] == kPlanColumns,
            "augment_gather: plan must be (B, 4) rows of (index, dy, dx, flip), got shape ",
            plan.shape());
  AugmentGatherArgs a;
  a.examples = images.shape()[0];
  a.batch = plan.shape()[0];
  a.channels = images.shape()[1];
  a.height = images.shape()[2];
  a.width = images.shape()[3];
  a.pad = pad;
  ECH_CHECK(pad >= 0, "augment_gather: pad ", pad, " < 0");
  ECH_CHECK(a.channels >= 1 && a.channels <= AugmentGatherArgs::kMaxChannels,
            "augment_gather: images have ", a.channels, " channels; 1 to ",
            AugmentGatherArgs::kMaxChannels, " are supported");
  ECH_CHECK(static_cast<int64_t>(scale.size()) == a.channels &&
                static_cast<int64_t>(shift.size()) == a.channels,
            "augment_gather: ", scale.size(), " scales and ", shift.size(), " shifts for ",
            a.channels, " channels");
  std::copy(scale.begin(), scale.end(), a.scale);
  std::copy(shift.begin(), shift.end(), a.shift);
  const Tensor plan_c = plan.contiguous(), images_c = images.contiguous();
  if (!plan_checked || !plan.is_cuda()) {
    const std::vector<int32_t> rows = plan_c.to_vector<int32_t>();
    for (int64_t b = 0; b < a.batch; ++b) {
      const int32_t* row = rows.data() + b * kPlanColumns;
      ECH_CHECK(row[kPlanIndex] >= 0 && row[kPlanIndex] < a.examples && row[kPlanDy] >= 0 &&
                    row[kPlanDy] <= 2 * pad && row[kPlanDx] >= 0 && row[kPlanDx] <= 2 * pad &&
                    (row[kPlanFlip] == 0 || row[kPlanFlip] == 1),
                "augment_gather: plan row ", b, " (index ", row[kPlanIndex], ", dy ", row[kPlanDy],
                ", dx ", row[kPlanDx], ", flip ", row[kPlanFlip],
                ") is out of range: index in [0, ", a.examples, "), dy and dx in [0, ", 2 * pad,
                "], flip 0 or 1");
    }
  }
  Tensor out = Tensor::empty({a.batch, a.channels, a.height, a.width}, kFloat32, images.device());
#if ECHELON_WITH_CUDA
  if (images.is_cuda()) {
    cuda::DeviceGuard guard(images.device().index);
    cuda::augment_gather(a, images_c.data<uint8_t>(), plan_c.data<int32_t>(), out.data<float>(),
                         cuda::current_stream(images.device().index));
    return out;
  }
#endif
  cpu::augment_gather(a, images_c.data<uint8_t>(), plan_c.data<int32_t>(), out.data<float>());
  return out;
}

}  // namespace echelon::ops
