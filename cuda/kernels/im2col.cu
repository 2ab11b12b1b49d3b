// im2col / col2im for convolution as GEMM (geometry and index layout: Conv2dGeometry in
// kernels/conv.h).
//
// im2col: one thread per column entry, so the (large) output is written coalesced and exactly
// once. col2im is its adjoint; instead of scattering column entries into pixels with atomics
// (order-dependent float sums, different from the CPU twin's), each thread owns one pixel and
// gathers the few column entries that read it, so the result is deterministic. Accumulating,
// the pixel's finished sum is added to x (the columns path of a convolution's input gradient
// added into autograd's gradient sum, bit for bit the old col2im then axpy).
// CPU twin: tensor/cpu/im2col.cpp (accumulate: that col2im's result, then an add).
#include <echelon/cuda/kernels/im2col.h>

#include <cstdint>

#include <echelon/cuda/launch.h>

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

// x (n, C, H, W) -> cols (n, C*KH*KW, OH*OW).
template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, Conv2dGeometry g, int64_t total) {
  const int64_t positions = g.out_h * g.out_w;
  const int64_t rows = g.c * g.kernel_h * g.kernel_w;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t q = i % positions;
    const int64_t r = (i / positions) % rows;
    const int64_t b = i / (positions * rows);
    const int64_t kj = r % g.kernel_w, ki = (r / g.kernel_w) % g.kernel_h;
    const int64_t c = r / (g.kernel_w * g.kernel_h);
    const int64_t h = (q / g.out_w) * g.stride_h - g.pad_h + ki * g.dilation_h;
    const int64_t w = (q % g.out_w) * g.stride_w - g.pad_w + kj * g.dilation_w;
    const bool inside = h >= 0 && h < g.h && w >= 0 && w < g.w;
    cols[i] = inside ? x[((b * g.c + c) * g.h + h) * g.w + w] : T(0);
  }
}

// cols (n, C*KH*KW, OH*OW) -> x (n, C, H, W), x overwritten with the sum of the entries reading
// each pixel (accumulate: that sum added to x, one add): entry (ki, kj, oh, ow) reads pixel
// (h, w) iff h = oh*sh - ph + ki*dh (same for w).
template <typename T>
__global__ void col2im_kernel(const T* cols, T* x, Conv2dGeometry g, int64_t total,
                              bool accumulate) {
  const int64_t positions = g.out_h * g.out_w;
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t w = i % g.w;
    const int64_t h = (i / g.w) % g.h;
    const int64_t c = (i / (g.w * g.h)) % g.c;
    const int64_t b = i / (g.w * g.h * g.c);
    const T* col_base = cols + (b * g.c + c) * g.kernel_h * g.kernel_w * positions;
    T sum = T(0);
    for (int64_t ki = 0; ki < g.kernel_h; ++ki) {
      const int64_t oh_scaled = h + g.pad_h - ki * g.dilation_h;
      if (oh_scaled < 0 || oh_scaled % g.stride_h != 0) continue;
      const int64_t oh = oh_scaled / g.stride_h;
      if (oh >= g.out_h) continue;
      for (int64_t kj = 0; kj < g.kernel_w; ++kj) {
        const int64_t ow_scaled = w + g.pad_w - kj * g.dilation_w;
        if (ow_scaled < 0 || ow_scaled % g.stride_w != 0) continue;
        const int64_t ow = ow_scaled / g.stride_w;
        if (ow >= g.out_w) continue;
        sum += col_base[(ki * g.kernel_w + kj) * positions + oh * g.out_w + ow];
      }
    }
    x[i] = accumulate ? x[i] + sum : sum;
  }
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void im2col(const T* x, T* cols, const Conv2dGeometry& g, cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.kernel_h * g.kernel_w * g.out_h * g.out_w;
  launch_1d("im2col", total, stream, im2col_kernel<T>, x, cols, g, total);
}

template <typename T>
void col2im(const T* cols, T* x, const Conv2dGeometry& g, cudaStream_t stream, bool accumulate) {
  const int64_t total = g.n * g.c * g.h * g.w;
  launch_1d("col2im", total, stream, col2im_kernel<T>, cols, x, g, total, accumulate);
}

template void im2col<float>(const float*, float*, const Conv2dGeometry&, cudaStream_t);
template void col2im<float>(const float*, float*, const Conv2dGeometry&, cudaStream_t, bool);

}  // namespace echelon::cuda
