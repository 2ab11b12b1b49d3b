// Dispatch for the im2col family (convolution building blocks).
#include <echelon/tensor/cpu/im2col.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/im2col.h>
#endif

namespace echelon::ops {
namespace {

// Validates the geometry against input_shape (N, C, H, W) and fills the kernels' arguments.
Im2colArgs make_args(const char* op, const Shape& input_shape, const Conv2dGeometry& g) {
  ECH_CHECK(input_shape.size() == 4, op, ": expected input shape (N, C, H, W), got ", input_shape);
  ECH_CHECK(g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0 &&
                g.dilation_h > 0 && g.dilation_w > 0 && g.pad_h >= 0 && g.pad_w >= 0,
            op, ": invalid geometry: kernel ", g.kernel_h, "x", g.kernel_w, ", stride ", g.stride_h,
            "x", g.stride_w, ", pad ", g.pad_h, "x", g.pad_w, ", dilation ", g.dilation_h, "x",
            g.dilation_w);
  Im2colArgs a;
  a.n = input_shape[0];
  a.channels = input_shape[1];
  a.height = input_shape[2];
  a.width = input_shape[3];
  a.kernel_h = g.kernel_h;
  a.kernel_w = g.kernel_w;
  a.stride_h = g.stride_h;
  a.stride_w = g.stride_w;
  a.pad_h = g.pad_h;
  a.pad_w = g.pad_w;
  a.dilation_h = g.dilation_h;
  a.dilation_w = g.dilation_w;
  a.out_h = g.out_h(a.height);
  a.out_w = g.out_w(a.width);
  ECH_CHECK(a.out_h > 0 && a.out_w > 0, op, ": the ", g.kernel_h, "x", g.kernel_w,
            " kernel (dilation ", g.dilation_h, "x", g.dilation_w, ", pad ", g.pad_h, "x", g.pad_w,
            ") does not fit input ", input_shape);
  return a;
}

Shape cols_shape(const Im2colArgs& a) {
  return {a.n, a.channels * a.kernel_h * a.kernel_w, a.out_h * a.out_w};
}

}  // namespace

Tensor im2col(const Tensor& x, const Conv2dGeometry& g) {
  detail::check_defined("im2col", x);
  detail::check_floating("im2col", x);
  const Im2colArgs a = make_args("im2col", x.shape(), g);
  const Tensor xc = x.contiguous();
  Tensor cols = Tensor::empty(cols_shape(a), x.dtype(), x.device());
  if (cols.numel() == 0) return cols;
#if ECHELON_WITH_CUDA
  if (x.is_cuda()) {
    detail::check_cuda_float("im2col", x);
    cuda::DeviceGuard guard(x.device().index);
    cuda::im2col<float>(xc.data<float>(), cols.data<float>(), a,
                        cuda::current_stream(x.device().index));
    return cols;
  }
#endif
  ECH_DISPATCH_FLOATING(x.dtype(), "im2col",
                        cpu::im2col<scalar_t>(xc.data<scalar_t>(), cols.data<scalar_t>(), a));
  return cols;
}

Tensor col2im(const Tensor& cols, const Conv2dGeometry& g, const Shape& input_shape) {
  detail::check_defined("col2im", cols);
  detail::check_floating("col2im", cols);
  const Im2colArgs a = make_args("col2im", input_shape, g);
  ECH_CHECK(cols.shape() == cols_shape(a), "col2im: columns shape ", cols.shape(),
            " does not match ", cols_shape(a), " expected for input ", input_shape);
  const Tensor cc = cols.contiguous();
  Tensor x = Tensor::empty(input_shape, cols.dtype(), cols.device());
  if (x.numel() == 0) return x;
#if ECHELON_WITH_CUDA
  if (cols.is_cuda()) {
    detail::check_cuda_float("col2im", cols);
    cuda::DeviceGuard guard(cols.device().index);
    cuda::col2im<float>(cc.data<float>(), x.data<float>(), a,
                        cuda::current_stream(cols.device().index));
    return x;
  }
#endif
  ECH_DISPATCH_FLOATING(cols.dtype(), "col2im",
                        cpu::col2im<scalar_t>(cc.data<scalar_t>(), x.data<scalar_t>(), a));
  return x;
}

}  // namespace echelon::ops
