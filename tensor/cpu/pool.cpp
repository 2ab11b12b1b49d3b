// Pooling CPU twins: plain loops over every window, PyTorch's window and divisor rules.
#include <echelon/tensor/cpu/pool.h>

#include <algorithm>
#include <cmath>

namespace echelon::cpu {

namespace {

struct Window {
  int64_t h0, h1, w0, w1;  // clipped to the image: rows [h0, h1), columns [w0, w1)
  int64_t divisor;         // average pooling divisor
};

Window window_of(const Pool2dGeometry& a, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * a.stride_h - a.pad_h, w0 = ow * a.stride_w - a.pad_w;
  // The padded window may run past the padding in ceil mode; PyTorch's divisor stops at it.
  const int64_t h1 = std::min(h0 + a.kernel_h, a.h + a.pad_h);
  const int64_t w1 = std::min(w0 + a.kernel_w, a.w + a.pad_w);
  const int64_t padded_size = (h1 - h0) * (w1 - w0);
  Window win{std::max<int64_t>(h0, 0), std::min(h1, a.h), std::max<int64_t>(w0, 0),
             std::min(w1, a.w), 0};
  win.divisor = a.count_include_pad ? padded_size : (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y, int64_t* argmax) {
  for (int64_t p = 0; p < a.n * a.c; ++p) {
    const T* plane = x + p * a.h * a.w;
    for (int64_t oh = 0; oh < a.out_h; ++oh)
      for (int64_t ow = 0; ow < a.out_w; ++ow) {
        const Window win = window_of(a, oh, ow);
        int64_t best = win.h0 * a.w + win.w0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) {
            const T v = plane[ih * a.w + iw];
            if (v > plane[best] || std::isnan(v)) best = ih * a.w + iw;
          }
        const int64_t out = (p * a.out_h + oh) * a.out_w + ow;
        y[out] = plane[best];
        argmax[out] = best;
      }
  }
}

template <typename T>
void max_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, const int64_t* argmax,
                         T* grad_in, const T* relu_out) {
  std::fill(grad_in, grad_in + a.n * a.c * a.h * a.w, T(0));
  const int64_t out_plane = a.out_h * a.out_w;
  for (int64_t p = 0; p < a.n * a.c; ++p)
    for (int64_t q = 0; q < out_plane; ++q) {
      const int64_t o = p * out_plane + q;
      if (relu_out && !(relu_out[o] > T(0))) continue;
      grad_in[p * a.h * a.w + argmax[o]] += grad_out[o];
    }
}

template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y) {
  for (int64_t p = 0; p < a.n * a.c; ++p) {
    const T* plane = x + p * a.h * a.w;
    for (int64_t oh = 0; oh < a.out_h; ++oh)
      for (int64_t ow = 0; ow < a.out_w; ++ow) {
        const Window win = window_of(a, oh, ow);
        double acc = 0.0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw)
            acc += static_cast<double>(plane[ih * a.w + iw]);
        y[(p * a.out_h + oh) * a.out_w + ow] =
            static_cast<T>(acc / static_cast<double>(win.divisor));
      }
  }
}

template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, T* grad_in) {
  std::fill(grad_in, grad_in + a.n * a.c * a.h * a.w, T(0));
  for (int64_t p = 0; p < a.n * a.c; ++p) {
    T* plane = grad_in + p * a.h * a.w;
    for (int64_t oh = 0; oh < a.out_h; ++oh)
      for (int64_t ow = 0; ow < a.out_w; ++ow) {
        const Window win = window_of(a, oh, ow);
        const T share = grad_out[(p * a.out_h + oh) * a.out_w + ow] / static_cast<T>(win.divisor);
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) plane[ih * a.w + iw] += share;
      }
  }
}

template void max_pool2d_forward<float>(const Pool2dGeometry&, const float*, float*, int64_t*);
template void max_pool2d_forward<double>(const Pool2dGeometry&, const double*, double*, int64_t*);
template void max_pool2d_backward<float>(const Pool2dGeometry&, const float*, const int64_t*,
                                         float*, const float*);
template void max_pool2d_backward<double>(const Pool2dGeometry&, const double*, const int64_t*,
                                          double*, const double*);
template void avg_pool2d_forward<float>(const Pool2dGeometry&, const float*, float*);
template void avg_pool2d_forward<double>(const Pool2dGeometry&, const double*, double*);
template void avg_pool2d_backward<float>(const Pool2dGeometry&, const float*, float*);
template void avg_pool2d_backward<double>(const Pool2dGeometry&, const double*, double*);

}  // namespace echelon::cpu
