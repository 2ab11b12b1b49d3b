// The fast CPU convolution: im2col over a group of images into one matrix, one BLAS GEMM per
// group, bias fused into the copy-out; image groups run on the fast path's thread pool
// (tensor/cpu/fast/parallel.h). The naive direct twins (tensor/cpu/conv.h) are its oracle.
// Needs OpenBLAS (cpu::blas_available()); ops falls back to the twins without it.
#pragma once

#include <echelon/kernels/conv.h>

namespace echelon::cpu::fast {

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
template <typename T>
void conv2d_forward(const Conv2dGeometry& a, const T* x, const T* w, const T* bias, T* y);
// grad_in (N, C, H, W) from grad_out (N, O, OH, OW) and w. Overwrites grad_in.
template <typename T>
void conv2d_backward_input(const Conv2dGeometry& a, const T* grad_out, const T* w, T* grad_in);
// True when conv2d_backward_input_add can take `a` (float; the paths that add in their store
// pass: Winograd F(4x4), the AVX-512 direct kernels); it takes the same path as
// conv2d_backward_input, so the values are the same.
bool conv2d_backward_input_adds(const Conv2dGeometry& a);
// grad_in += conv2d_backward_input's result, each element grad_in + value (the autograd engine's
// gradient sum without its separate pass), where conv2d_backward_input_adds(a).
void conv2d_backward_input_add(const Conv2dGeometry& a, const float* grad_out, const float* w,
                               float* grad_in);
// grad_w (O, C, KH, KW) from grad_out and x. Overwrites grad_w. Per-thread partial sums are added
// in a fixed order: the result depends on the thread count, not on timing.
template <typename T>
void conv2d_backward_weight(const Conv2dGeometry& a, const T* grad_out, const T* x, T* grad_w);
// grad_bias (O) = sum of grad_out over N, OH, OW. Overwrites grad_bias.
template <typename T>
void conv2d_backward_bias(const Conv2dGeometry& a, const T* grad_out, T* grad_bias);
// conv2d_relu's ReLU backward and bias gradient in one pass over memory: masked = grad_out *
// (relu_out > 0) (N, O, OH, OW), grad_bias (O) its sums, bit-identical to the ReLU backward then
// conv2d_backward_bias (each plane is masked, then summed by the same loop while in cache).
template <typename T>
void conv2d_relu_backward_bias(const Conv2dGeometry& a, const T* grad_out, const T* relu_out,
                               T* masked, T* grad_bias);

// im2col / col2im of `count` images into/from a (C*KH*KW, count*OH*OW) matrix whose row r holds
// image i's columns at [i*OH*OW, (i+1)*OH*OW): the layout one GEMM over the group needs.
template <typename T>
void im2col_group(const Conv2dGeometry& a, const T* x, int64_t count, T* cols);
// Overwrites x (count, C, H, W) with the sum of the columns that read each pixel.
template <typename T>
void col2im_group(const Conv2dGeometry& a, const T* cols, int64_t count, T* x);

}  // namespace echelon::cpu::fast
