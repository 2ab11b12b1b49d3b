// Naive CPU twins of cuda/kernels/shape.cu (indexing ops, the option-A shortcut).
#include <echelon/tensor/cpu/shape.h>

#include <algorithm>

namespace echelon::cpu {

template <typename T>
void index_select(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
                  int64_t inner, int64_t num_index) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < num_index; ++k)
      for (int64_t i = 0; i < inner; ++i)
        out[(o * num_index + k) * inner + i] = x[(o * dim_size + index[k]) * inner + i];
}

template <typename T>
void gather(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
            int64_t inner, int64_t index_size) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < index_size; ++k)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t at = (o * index_size + k) * inner + i;
        out[at] = x[(o * dim_size + index[at]) * inner + i];
      }
}

template <typename T>
void one_hot(const int64_t* labels, T* out, int64_t n, int64_t num_classes) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < num_classes; ++c)
      out[i * num_classes + c] = labels[i] == c ? T(1) : T(0);
}

void count_out_of_range(const int64_t* index, int64_t n, int64_t size, int64_t* count,
                        int64_t* first_bad) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] >= 0 && index[i] < size) continue;
    if (bad == 0) *first_bad = index[i];
    ++bad;
  }
  *count = bad;
}

namespace {

// Calls keep(x_at, y_at) for every pixel of x (n, c, h, w) the option-A shortcut keeps, with its
// place in y (n, c + 2 pad, ceil(h / stride), ceil(w / stride)): the forward copies along these
// pairs, its adjoint back along them.
template <typename Keep>
void for_each_kept_pixel(int64_t n, int64_t c, int64_t h, int64_t w, int64_t pad, int64_t stride,
                         Keep keep) {
  const int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < c; ++k)
      for (int64_t a = 0; a < oh; ++a)
        for (int64_t b = 0; b < ow; ++b)
          keep(((i * c + k) * h + stride * a) * w + stride * b,
               ((i * (c + 2 * pad) + pad + k) * oh + a) * ow + b);
}

}  // namespace

template <typename T>
void pad_channels_subsample(const T* x, T* y, int64_t n, int64_t c, int64_t h, int64_t w,
                            int64_t pad, int64_t stride) {
  const int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  std::fill(y, y + n * (c + 2 * pad) * oh * ow, T(0));
  for_each_kept_pixel(n, c, h, w, pad, stride,
                      [&](int64_t x_at, int64_t y_at) { y[y_at] = x[x_at]; });
}

template <typename T>
void pad_channels_subsample_backward(const T* g, T* gx, int64_t n, int64_t c, int64_t h, int64_t w,
                                     int64_t pad, int64_t stride) {
  std::fill(gx, gx + n * c * h * w, T(0));
  for_each_kept_pixel(n, c, h, w, pad, stride,
                      [&](int64_t x_at, int64_t y_at) { gx[x_at] = g[y_at]; });
}

void augment_gather(const AugmentGatherArgs& a, const uint8_t* images, const int32_t* plan,
                    float* out) {
  const int64_t plane = a.height * a.width;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int32_t* row = plan + b * kPlanColumns;
    const uint8_t* image = images + row[kPlanIndex] * a.channels * plane;
    for (int64_t c = 0; c < a.channels; ++c)
      for (int64_t y = 0; y < a.height; ++y)
        for (int64_t x = 0; x < a.width; ++x) {
          const int64_t src_y = y + row[kPlanDy] - a.pad;
          const int64_t src_x = (row[kPlanFlip] ? a.width - 1 - x : x) + row[kPlanDx] - a.pad;
          const bool inside = src_y >= 0 && src_y < a.height && src_x >= 0 && src_x < a.width;
          const uint8_t pixel = inside ? image[c * plane + src_y * a.width + src_x] : 0;
          out[((b * a.channels + c) * a.height + y) * a.width + x] =
              static_cast<float>(pixel) * a.scale[c] + a.shift[c];
        }
  }
}

template void index_select<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                                  int64_t);
template void index_select<double>(const double*, const int64_t*, double*, int64_t, int64_t,
                                   int64_t, int64_t);
template void index_select<int64_t>(const int64_t*, const int64_t*, int64_t*, int64_t, int64_t,
                                    int64_t, int64_t);
template void gather<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                            int64_t);
template void gather<double>(const double*, const int64_t*, double*, int64_t, int64_t, int64_t,
                             int64_t);
template void one_hot<float>(const int64_t*, float*, int64_t, int64_t);
template void one_hot<double>(const int64_t*, double*, int64_t, int64_t);
template void pad_channels_subsample<float>(const float*, float*, int64_t, int64_t, int64_t,
                                            int64_t, int64_t, int64_t);
template void pad_channels_subsample<double>(const double*, double*, int64_t, int64_t, int64_t,
                                             int64_t, int64_t, int64_t);
template void pad_channels_subsample_backward<float>(const float*, float*, int64_t, int64_t,
                                                     int64_t, int64_t, int64_t, int64_t);
template void pad_channels_subsample_backward<double>(const double*, double*, int64_t, int64_t,
                                                      int64_t, int64_t, int64_t, int64_t);

}  // namespace echelon::cpu
