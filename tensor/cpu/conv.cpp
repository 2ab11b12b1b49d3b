// Convolution CPU twins: the naive direct convolution, the oracle of the fast path
// (tensor/cpu/fast/conv.cpp).
#include <echelon/tensor/cpu/conv.h>

#include <algorithm>

#include <echelon/kernels/conv.h>

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

template <typename T>
void conv2d_relu_backward_bias(const Conv2dGeometry& a, const T* grad_out, const T* relu_out,
                               T* masked, T* grad_bias) {
  const int64_t plane = a.out_h * a.out_w;
  for (int64_t o = 0; o < a.o; ++o) {
    double acc = 0.0;
    for (int64_t n = 0; n < a.n; ++n)
      for (int64_t q = 0; q < plane; ++q) {
        const int64_t at = (n * a.o + o) * plane + q;
        masked[at] = relu_out[at] > T(0) ? grad_out[at] : T(0);
        acc += static_cast<double>(masked[at]);
      }
    grad_bias[o] = static_cast<T>(acc);
  }
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_CONV(T)                                                             \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*); \
  template void conv2d_backward_input<T>(const Conv2dGeometry&, const T*, const T*, T*);    \
  template void conv2d_backward_weight<T>(const Conv2dGeometry&, const T*, const T*, T*);   \
  template void conv2d_backward_bias<T>(const Conv2dGeometry&, const T*, T*);               \
  template void conv2d_relu_backward_bias<T>(const Conv2dGeometry&, const T*, const T*, T*, T*);
ECH_INSTANTIATE_CONV(float)
ECH_INSTANTIATE_CONV(double)
#undef ECH_INSTANTIATE_CONV
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu
