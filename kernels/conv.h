// Convolution geometry shared by the CPU twins (tensor/cpu/conv, tensor/cpu/im2col), the CUDA
// kernels (cuda/kernels/conv, cuda/kernels/im2col) and cuDNN descriptors.
#pragma once

#include <cstdint>

namespace echelon {

// Geometry of one im2col/col2im call: input (n, channels, height, width) and output columns
// (n, channels*kernel_h*kernel_w, out_h*out_w). Row r of the columns is (c, ki, kj) with
// r = (c*kernel_h + ki)*kernel_w + kj; column q is (oh, ow) with q = oh*out_w + ow; it reads
// input pixel (oh*stride_h - pad_h + ki*dilation_h, ow*stride_w - pad_w + kj*dilation_w), zero
// when outside the image.
struct Im2colArgs {
  int64_t n = 1, channels = 1, height = 1, width = 1;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t out_h = 1, out_w = 1;
};

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
