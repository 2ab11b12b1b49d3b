// Convolution CPU twins. `conv2d_*` are the naive reference (a direct 7-loop convolution, double
// accumulation): the oracle every other path is tested against. The fast CPU path (batched
// im2col + BLAS) is separate, in tensor/cpu/fast/conv.h, so the oracle stays naive.
// cuda/kernels/conv.h declares the same `conv2d_*` names for float on a stream.
#pragma once

#include <cstdint>

#include <echelon/kernels/conv.h>

namespace echelon::cpu {

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
template <typename T>
void conv2d_forward(const Conv2dGeometry& a, const T* x, const T* w, const T* bias, T* y);
// grad_in (N, C, H, W) = d loss / d x, from grad_out (N, O, OH, OW) and w. Overwrites grad_in.
template <typename T>
void conv2d_backward_input(const Conv2dGeometry& a, const T* grad_out, const T* w, T* grad_in);
// grad_w (O, C, KH, KW) from grad_out and x. Overwrites grad_w.
template <typename T>
void conv2d_backward_weight(const Conv2dGeometry& a, const T* grad_out, const T* x, T* grad_w);
// grad_bias (O) = sum of grad_out over N, OH, OW. Overwrites grad_bias.
template <typename T>
void conv2d_backward_bias(const Conv2dGeometry& a, const T* grad_out, T* grad_bias);
// conv2d_relu's ReLU backward and bias gradient in one pass: masked (N, O, OH, OW) = grad_out *
// (relu_out > 0) (`relu_out > 0 ? g : 0`), grad_bias (O) = its sums in conv2d_backward_bias's
// order. The twin of cuda::conv2d_relu_backward_bias.
template <typename T>
void conv2d_relu_backward_bias(const Conv2dGeometry& a, const T* grad_out, const T* relu_out,
                               T* masked, T* grad_bias);

}  // namespace echelon::cpu
