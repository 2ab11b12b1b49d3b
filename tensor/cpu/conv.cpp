// Convolution CPU twins: the naive direct convolution (the oracle) and the im2col + GEMM fast path.
#include <echelon/tensor/cpu/conv.h>

#include <algorithm>
#include <vector>

#include <echelon/kernels/conv.h>
#include <echelon/tensor/cpu/im2col.h>
#include <echelon/tensor/cpu/matmul.h>

namespace echelon::cpu {

namespace {

// Input row/column read by output position `out` and kernel tap `tap`; may fall in the padding.
inline int64_t input_coord(int64_t out, int64_t tap, int64_t stride, int64_t pad,
                           int64_t dilation) {
  return out * stride - pad + tap * dilation;
}

}  // namespace

// ---- naive twins -------------------------------------------------------------------------------

template <typename T>
void conv2d_forward(const Conv2dGeometry& a, const T* x, const T* w, const T* bias, T* y) {
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t o = 0; o < a.o; ++o)
      for (int64_t oh = 0; oh < a.out_h; ++oh)
        for (int64_t ow = 0; ow < a.out_w; ++ow) {
          double acc = bias ? static_cast<double>(bias[o]) : 0.0;
          for (int64_t c = 0; c < a.c; ++c)
            for (int64_t ki = 0; ki < a.kernel_h; ++ki) {
              const int64_t ih = input_coord(oh, ki, a.stride_h, a.pad_h, a.dilation_h);
              if (ih < 0 || ih >= a.h) continue;
              for (int64_t kj = 0; kj < a.kernel_w; ++kj) {
                const int64_t iw = input_coord(ow, kj, a.stride_w, a.pad_w, a.dilation_w);
                if (iw < 0 || iw >= a.w) continue;
                acc += static_cast<double>(x[((n * a.c + c) * a.h + ih) * a.w + iw]) *
                       static_cast<double>(w[((o * a.c + c) * a.kernel_h + ki) * a.kernel_w + kj]);
              }
            }
          y[((n * a.o + o) * a.out_h + oh) * a.out_w + ow] = static_cast<T>(acc);
        }
}

template <typename T>
void conv2d_backward_input(const Conv2dGeometry& a, const T* grad_out, const T* w, T* grad_in) {
  // Scatter form: every (output, tap) pair adds its contribution to the input pixel it read.
  std::fill(grad_in, grad_in + a.n * a.c * a.h * a.w, T(0));
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t o = 0; o < a.o; ++o)
      for (int64_t oh = 0; oh < a.out_h; ++oh)
        for (int64_t ow = 0; ow < a.out_w; ++ow) {
          const T g = grad_out[((n * a.o + o) * a.out_h + oh) * a.out_w + ow];
          for (int64_t c = 0; c < a.c; ++c)
            for (int64_t ki = 0; ki < a.kernel_h; ++ki) {
              const int64_t ih = input_coord(oh, ki, a.stride_h, a.pad_h, a.dilation_h);
              if (ih < 0 || ih >= a.h) continue;
              for (int64_t kj = 0; kj < a.kernel_w; ++kj) {
                const int64_t iw = input_coord(ow, kj, a.stride_w, a.pad_w, a.dilation_w);
                if (iw < 0 || iw >= a.w) continue;
                grad_in[((n * a.c + c) * a.h + ih) * a.w + iw] +=
                    g * w[((o * a.c + c) * a.kernel_h + ki) * a.kernel_w + kj];
              }
            }
        }
}

template <typename T>
void conv2d_backward_weight(const Conv2dGeometry& a, const T* grad_out, const T* x, T* grad_w) {
  for (int64_t o = 0; o < a.o; ++o)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t ki = 0; ki < a.kernel_h; ++ki)
        for (int64_t kj = 0; kj < a.kernel_w; ++kj) {
          double acc = 0.0;
          for (int64_t n = 0; n < a.n; ++n)
            for (int64_t oh = 0; oh < a.out_h; ++oh) {
              const int64_t ih = input_coord(oh, ki, a.stride_h, a.pad_h, a.dilation_h);
              if (ih < 0 || ih >= a.h) continue;
              for (int64_t ow = 0; ow < a.out_w; ++ow) {
                const int64_t iw = input_coord(ow, kj, a.stride_w, a.pad_w, a.dilation_w);
                if (iw < 0 || iw >= a.w) continue;
                acc +=
                    static_cast<double>(grad_out[((n * a.o + o) * a.out_h + oh) * a.out_w + ow]) *
                    static_cast<double>(x[((n * a.c + c) * a.h + ih) * a.w + iw]);
              }
            }
          grad_w[((o * a.c + c) * a.kernel_h + ki) * a.kernel_w + kj] = static_cast<T>(acc);
        }
}

template <typename T>
void conv2d_backward_bias(const Conv2dGeometry& a, const T* grad_out, T* grad_bias) {
  const int64_t plane = a.out_h * a.out_w;
  for (int64_t o = 0; o < a.o; ++o) {
    double acc = 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t q = 0; q < plane; ++q)
        acc += static_cast<double>(grad_out[(n * a.o + o) * plane + q]);
    grad_bias[o] = static_cast<T>(acc);
  }
}

// ---- fast path: im2col + GEMM, one image at a time (columns stay small) ------------------------

namespace {

// OpenBLAS when the library has it; the naive twin otherwise (still correct, just slow).
template <typename T>
void fast_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (blas_available())
    gemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else
    gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

template <typename T>
void conv2d_forward_gemm(const Conv2dGeometry& a, const T* x, const T* w, const T* bias, T* y) {
  const Conv2dGeometry g = a.with_images(1);
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, cols_per_image = a.out_h * a.out_w;
  std::vector<T> cols(static_cast<size_t>(rows * cols_per_image));
  for (int64_t n = 0; n < a.n; ++n) {
    im2col(x + n * a.c * a.h * a.w, cols.data(), g);
    T* y_n = y + n * a.o * cols_per_image;  // (O, OH*OW) = w (O, rows) x cols (rows, OH*OW)
    fast_gemm(false, false, a.o, cols_per_image, rows, T(1), w, rows, cols.data(), cols_per_image,
              T(0), y_n, cols_per_image);
    if (bias)
      for (int64_t o = 0; o < a.o; ++o)
        for (int64_t q = 0; q < cols_per_image; ++q) y_n[o * cols_per_image + q] += bias[o];
  }
}

template <typename T>
void conv2d_backward_input_gemm(const Conv2dGeometry& a, const T* grad_out, const T* w,
                                T* grad_in) {
  const Conv2dGeometry g = a.with_images(1);
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, cols_per_image = a.out_h * a.out_w;
  std::vector<T> cols(static_cast<size_t>(rows * cols_per_image));
  for (int64_t n = 0; n < a.n; ++n) {
    // cols (rows, OH*OW) = w^T (rows, O) x grad_out_n (O, OH*OW); col2im scatters them back.
    fast_gemm(true, false, rows, cols_per_image, a.o, T(1), w, rows,
              grad_out + n * a.o * cols_per_image, cols_per_image, T(0), cols.data(),
              cols_per_image);
    col2im(cols.data(), grad_in + n * a.c * a.h * a.w, g);
  }
}

template <typename T>
void conv2d_backward_weight_gemm(const Conv2dGeometry& a, const T* grad_out, const T* x,
                                 T* grad_w) {
  const Conv2dGeometry g = a.with_images(1);
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, cols_per_image = a.out_h * a.out_w;
  std::vector<T> cols(static_cast<size_t>(rows * cols_per_image));
  std::fill(grad_w, grad_w + a.o * rows, T(0));  // an empty batch has a zero gradient
  for (int64_t n = 0; n < a.n; ++n) {
    im2col(x + n * a.c * a.h * a.w, cols.data(), g);
    // grad_w (O, rows) += grad_out_n (O, OH*OW) x cols^T (OH*OW, rows)
    fast_gemm(false, true, a.o, rows, cols_per_image, T(1), grad_out + n * a.o * cols_per_image,
              cols_per_image, cols.data(), cols_per_image, T(1), grad_w, rows);
  }
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_CONV(T)                                                                  \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*);      \
  template void conv2d_backward_input<T>(const Conv2dGeometry&, const T*, const T*, T*);         \
  template void conv2d_backward_weight<T>(const Conv2dGeometry&, const T*, const T*, T*);        \
  template void conv2d_backward_bias<T>(const Conv2dGeometry&, const T*, T*);                    \
  template void conv2d_forward_gemm<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*); \
  template void conv2d_backward_input_gemm<T>(const Conv2dGeometry&, const T*, const T*, T*);    \
  template void conv2d_backward_weight_gemm<T>(const Conv2dGeometry&, const T*, const T*, T*);
ECH_INSTANTIATE_CONV(float)
ECH_INSTANTIATE_CONV(double)
#undef ECH_INSTANTIATE_CONV
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu
