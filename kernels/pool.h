// Pooling geometry: ONE struct from the pooling layers down to the kernels (the autograd
// functions, ops::{max,avg}_pool2d, the CPU twins in tensor/cpu/pool and the CUDA kernels in
// cuda/kernels/pool).
#pragma once

#include <cstdint>

namespace echelon {

// A caller (a pooling layer, a test) sets the window; the ops fill the shapes from their tensors
// with for_input(): input (n, c, h, w) -> output (n, c, out_h, out_w), one plane per (n, c).
// Window (oh, ow) covers input rows [oh*stride_h - pad_h, +kernel_h) and columns likewise,
// clipped to the image.
struct Pool2dGeometry {
  // The window (the caller's).
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;         // round the output size up instead of down (as PyTorch)
  bool count_include_pad = true;  // average pooling: divide by the padded window size
  // The shapes (set by for_input).
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t out_h = 0, out_w = 0;

  // Output size along one spatial dim: PyTorch's pooling_output_shape (the only place it is
  // written). In ceil mode the last window must start inside the input or its left padding.
  static constexpr int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                                    bool ceil_mode) {
    const int64_t span = in + 2 * pad - kernel;
    int64_t out = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
    if (ceil_mode && (out - 1) * stride >= in + pad) --out;
    return out;
  }

  // Whether flat index `at` (ih * w + iw) of an input plane lies in window (oh, ow), clipped to
  // the image: where max_pool2d puts every argmax (its backward's gather relies on it).
  constexpr bool window_holds(int64_t oh, int64_t ow, int64_t at) const {
    if (at < 0 || at >= h * w) return false;
    const int64_t ih = at / w, iw = at % w;
    const int64_t h0 = oh * stride_h - pad_h, w0 = ow * stride_w - pad_w;
    return ih >= h0 && ih < h0 + kernel_h && iw >= w0 && iw < w0 + kernel_w;
  }

  // This window over input (images, channels, height, width).
  constexpr Pool2dGeometry for_input(int64_t images, int64_t channels, int64_t height,
                                     int64_t width) const {
    Pool2dGeometry g = *this;
    g.n = images;
    g.c = channels;
    g.h = height;
    g.w = width;
    g.out_h = out_size(height, kernel_h, stride_h, pad_h, ceil_mode);
    g.out_w = out_size(width, kernel_w, stride_w, pad_w, ceil_mode);
    return g;
  }
};

}  // namespace echelon
