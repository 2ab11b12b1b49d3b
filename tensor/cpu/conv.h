// Convolution CPU twins. `conv2d_*` are the naive reference (a direct 7-loop convolution, double
// accumulation): the oracle every other path is tested against. `conv2d_*_gemm` are the fast CPU
// path (im2col + GEMM, BLAS when built), a separate function so the oracle stays naive.
// cuda/kernels/conv.h declares the same `conv2d_*` names for float on a stream.
#pragma once

#include <cstdint>

#include "tensor/cpu/kernel_args.h"

namespace echelon {

// Geometry of one 2-D convolution, shared by the CPU twins and the CUDA kernels.
// Input (n, c, h, w), weight (o, c, kernel_h, kernel_w), output (n, o, out_h, out_w).
struct ConvArgs {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t o = 1, kernel_h = 1, kernel_w = 1;
  int64_t out_h = 1, out_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
};

// The im2col geometry of `images` images of this convolution (im2col + GEMM paths, both backends).
inline Im2colArgs im2col_args_of(const ConvArgs& a, int64_t images) {
  Im2colArgs g;
  g.n = images;
  g.channels = a.c;
  g.height = a.h;
  g.width = a.w;
  g.kernel_h = a.kernel_h;
  g.kernel_w = a.kernel_w;
  g.stride_h = a.stride_h;
  g.stride_w = a.stride_w;
  g.pad_h = a.pad_h;
  g.pad_w = a.pad_w;
  g.dilation_h = a.dilation_h;
  g.dilation_w = a.dilation_w;
  g.out_h = a.out_h;
  g.out_w = a.out_w;
  return g;
}

}  // namespace echelon

namespace echelon::cpu {

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O); bias may be null.
template <typename T>
void conv2d_forward(const ConvArgs& a, const T* x, const T* w, const T* bias, T* y);
// grad_in (N, C, H, W) = d loss / d x, from grad_out (N, O, OH, OW) and w. Overwrites grad_in.
template <typename T>
void conv2d_backward_input(const ConvArgs& a, const T* grad_out, const T* w, T* grad_in);
// grad_w (O, C, KH, KW) from grad_out and x. Overwrites grad_w.
template <typename T>
void conv2d_backward_weight(const ConvArgs& a, const T* grad_out, const T* x, T* grad_w);
// grad_bias (O) = sum of grad_out over N, OH, OW. Overwrites grad_bias.
template <typename T>
void conv2d_backward_bias(const ConvArgs& a, const T* grad_out, T* grad_bias);

// ---- fast CPU path: im2col + GEMM (OpenBLAS when built, else the naive GEMM twin) ----
template <typename T>
void conv2d_forward_gemm(const ConvArgs& a, const T* x, const T* w, const T* bias, T* y);
template <typename T>
void conv2d_backward_input_gemm(const ConvArgs& a, const T* grad_out, const T* w, T* grad_in);
template <typename T>
void conv2d_backward_weight_gemm(const ConvArgs& a, const T* grad_out, const T* x, T* grad_w);

}  // namespace echelon::cpu
