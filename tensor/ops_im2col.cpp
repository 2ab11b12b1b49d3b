// Dispatch for the im2col family (convolution building blocks).
#include <echelon/tensor/cpu/im2col.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/im2col.h>
#endif

namespace echelon::ops {
namespace {

Shape cols_shape(const Conv2dGeometry& a) {
  return {a.n, a.c * a.kernel_h * a.kernel_w, a.out_h * a.out_w};
}

}  // namespace

Tensor im2col(const Tensor& x, const Conv2dGeometry& g) {
  detail::check_defined("im2col", x);
  detail::check_floating("im2col", x);
  const Conv2dGeometry a = detail::conv_geometry("im2col", x.shape(), /*out_channels=*/0, g);
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
  const Conv2dGeometry a = detail::conv_geometry("col2im", input_shape, /*out_channels=*/0, g);
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
