// Naive CPU twins of cuda/kernels/im2col.cu. col2im is written as the exact adjoint of im2col
// (same index walk, scatter-add instead of gather), so <col2im(y), x> == <y, im2col(x)>.
#include <echelon/tensor/cpu/im2col.h>

#include <algorithm>

namespace echelon::cpu {

template <typename T>
void im2col(const T* x, T* cols, const Conv2dGeometry& g) {
  const int64_t rows = g.c * g.kernel_h * g.kernel_w;
  const int64_t positions = g.out_h * g.out_w;
  for (int64_t n = 0; n < g.n; ++n) {
    const T* image = x + n * g.c * g.h * g.w;
    T* image_cols = cols + n * rows * positions;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t kj = r % g.kernel_w, ki = (r / g.kernel_w) % g.kernel_h;
      const int64_t c = r / (g.kernel_w * g.kernel_h);
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t h = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
          const int64_t w = ow * g.stride_w - g.pad_w + kj * g.dilation_w;
          const bool inside = h >= 0 && h < g.h && w >= 0 && w < g.w;
          image_cols[r * positions + oh * g.out_w + ow] =
              inside ? image[(c * g.h + h) * g.w + w] : T(0);
        }
      }
    }
  }
}

template <typename T>
void col2im(const T* cols, T* x, const Conv2dGeometry& g) {
  const int64_t rows = g.c * g.kernel_h * g.kernel_w;
  const int64_t positions = g.out_h * g.out_w;
  std::fill(x, x + g.n * g.c * g.h * g.w, T(0));
  for (int64_t n = 0; n < g.n; ++n) {
    T* image = x + n * g.c * g.h * g.w;
    const T* image_cols = cols + n * rows * positions;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t kj = r % g.kernel_w, ki = (r / g.kernel_w) % g.kernel_h;
      const int64_t c = r / (g.kernel_w * g.kernel_h);
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t h = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
          const int64_t w = ow * g.stride_w - g.pad_w + kj * g.dilation_w;
          if (h >= 0 && h < g.h && w >= 0 && w < g.w)
            image[(c * g.h + h) * g.w + w] += image_cols[r * positions + oh * g.out_w + ow];
        }
      }
    }
  }
}

template void im2col<float>(const float*, float*, const Conv2dGeometry&);
template void im2col<double>(const double*, double*, const Conv2dGeometry&);
template void col2im<float>(const float*, float*, const Conv2dGeometry&);
template void col2im<double>(const double*, double*, const Conv2dGeometry&);

}  // namespace echelon::cpu
