// Convolution geometry: ONE struct from the Conv2d layer down to the kernels (the autograd
// function, ops::conv2d and ops::im2col, the CPU twins in tensor/cpu/{conv,im2col}, the CUDA
// kernels in cuda/kernels/{conv,im2col} and the cuDNN descriptors in cuda/cudnn/conv).
#pragma once

#include <cstdint>

namespace echelon {

// A caller (a Conv2d layer, a test) sets the window: kernel, stride, padding, dilation. The ops
// fill the shapes from their tensors with for_input(); everything below them reads the filled
// struct: input (n, c, h, w), weight (o, c, kernel_h, kernel_w), output (n, o, out_h, out_w).
//
// As im2col columns (n, c*kernel_h*kernel_w, out_h*out_w): row r is (c, ki, kj) with
// r = (c*kernel_h + ki)*kernel_w + kj, column q is (oh, ow) with q = oh*out_w + ow, and entry
// (r, q) reads input pixel (oh*stride_h - pad_h + ki*dilation_h, ow*stride_w - pad_w +
// kj*dilation_w), zero when outside the image. im2col ignores o.
struct Conv2dGeometry {
  // The window (the caller's).
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  // The shapes (set by for_input).
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0;
  int64_t out_h = 0, out_w = 0;

  // Output size along one spatial dim (PyTorch's formula; the only place it is written).
  // Meaningful only when the dilated kernel fits the padded input, which the ops check.
  static constexpr int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                    int64_t dilation) {
    return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
  }

  // This window over input (images, channels, height, width) with out_channels filters.
  constexpr Conv2dGeometry for_input(int64_t images, int64_t channels, int64_t height,
                                     int64_t width, int64_t out_channels) const {
    Conv2dGeometry g = *this;
    g.n = images;
    g.c = channels;
    g.h = height;
    g.w = width;
    g.o = out_channels;
    g.out_h = out_size(height, kernel_h, stride_h, pad_h, dilation_h);
    g.out_w = out_size(width, kernel_w, stride_w, pad_w, dilation_w);
    return g;
  }

  // The same geometry over `images` images: the batched im2col + GEMM paths work in chunks.
  constexpr Conv2dGeometry with_images(int64_t images) const {
    Conv2dGeometry g = *this;
    g.n = images;
    return g;
  }
};

}  // namespace echelon
