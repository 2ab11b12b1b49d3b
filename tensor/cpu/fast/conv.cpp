// The fast CPU convolution (tensor/cpu/fast/conv.h). Each pool task takes a contiguous range of
// images and walks it in groups whose im2col matrix stays within kColumnsBudget bytes (cache
// sized), so one GEMM covers many images (small layers such as LeNet's make one GEMM per task),
// while a single large image still gets a GEMM of its own.
#include <echelon/tensor/cpu/fast/conv.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>
#include <echelon/tensor/cpu/matmul.h>

namespace echelon::cpu::fast {
namespace {

constexpr int64_t kColumnsBudget = int64_t{2} << 20;  // bytes of im2col matrix per GEMM
// The backward data's group also writes grad_in and reads a gathered copy of grad_out: with 2 MiB
// of columns the three outgrow a 2 MiB L2, and col2im (about half of the call) reads the columns
// back from L3. Half the budget was 7-18% faster on ResNet-20's stride-2 layers (bench/RESULTS.md).
constexpr int64_t kBackwardInputColumnsBudget = int64_t{1} << 20;

struct Dims {
  int64_t rows, positions, image_in, image_out;  // C*KH*KW, OH*OW, C*H*W, O*OH*OW
};

Dims dims_of(const Conv2dGeometry& a) {
  return {a.c * a.kernel_h * a.kernel_w, a.out_h * a.out_w, a.c * a.h * a.w,
          a.o * a.out_h * a.out_w};
}

// Images per GEMM: as many as fit the budget, at least one.
template <typename T>
int64_t group_size(const Dims& d, int64_t budget = kColumnsBudget) {
  const int64_t per_image = std::max<int64_t>(d.rows * d.positions * int64_t(sizeof(T)), 1);
  return std::max<int64_t>(1, budget / per_image);
}

// The output columns [ow0, ow1) whose input column ow*stride - pad + tap*dilation is inside [0, w).
void valid_span(int64_t out_w, int64_t w, int64_t stride, int64_t pad, int64_t tap_offset,
                int64_t* ow0, int64_t* ow1) {
  const int64_t first = pad - tap_offset;  // the smallest ow*stride that lands inside
  *ow0 = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t last = w - 1 + pad - tap_offset;  // the largest ow*stride that lands inside
  *ow1 = last < 0 ? 0 : std::min(out_w, last / stride + 1);
  *ow0 = std::min(*ow0, *ow1);
}

// (O, count*P) <- grad_out (count, O, P): the GEMM operand of a group.
template <typename T>
void gather_outputs(const Dims& d, int64_t o, const T* grad_out, int64_t count, T* dst) {
  for (int64_t i = 0; i < count; ++i)
    for (int64_t k = 0; k < o; ++k)
      std::memcpy(dst + k * count * d.positions + i * d.positions,
                  grad_out + i * d.image_out + k * d.positions, sizeof(T) * d.positions);
}

}  // namespace

template <typename T>
void im2col_group(const Conv2dGeometry& a, const T* x, int64_t count, T* cols) {
  const Dims d = dims_of(a);
  const int64_t ld = count * d.positions;
  for (int64_t r = 0; r < d.rows; ++r) {
    const int64_t kj = r % a.kernel_w, ki = (r / a.kernel_w) % a.kernel_h;
    const int64_t c = r / (a.kernel_w * a.kernel_h);
    int64_t ow0 = 0, ow1 = 0;
    valid_span(a.out_w, a.w, a.stride_w, a.pad_w, kj * a.dilation_w, &ow0, &ow1);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t oh = 0; oh < a.out_h; ++oh) {
        T* dst = cols + r * ld + i * d.positions + oh * a.out_w;
        const int64_t ih = oh * a.stride_h - a.pad_h + ki * a.dilation_h;
        if (ih < 0 || ih >= a.h) {
          std::fill(dst, dst + a.out_w, T(0));
          continue;
        }
        const T* row = x + i * d.image_in + (c * a.h + ih) * a.w;
        const int64_t shift = kj * a.dilation_w - a.pad_w;  // input column = ow*stride + shift
        std::fill(dst, dst + ow0, T(0));
        if (a.stride_w == 1) {
          const T* from = row + ow0 + shift;  // rows are short: an inlined loop beats memcpy
#pragma omp simd
          for (int64_t q = 0; q < ow1 - ow0; ++q) dst[ow0 + q] = from[q];
        } else {
          for (int64_t ow = ow0; ow < ow1; ++ow) dst[ow] = row[ow * a.stride_w + shift];
        }
        std::fill(dst + ow1, dst + a.out_w, T(0));
      }
  }
}

template <typename T>
void col2im_group(const Conv2dGeometry& a, const T* cols, int64_t count, T* x) {
  const Dims d = dims_of(a);
  const int64_t ld = count * d.positions;
  std::fill(x, x + count * d.image_in, T(0));
  for (int64_t r = 0; r < d.rows; ++r) {
    const int64_t kj = r % a.kernel_w, ki = (r / a.kernel_w) % a.kernel_h;
    const int64_t c = r / (a.kernel_w * a.kernel_h);
    int64_t ow0 = 0, ow1 = 0;
    valid_span(a.out_w, a.w, a.stride_w, a.pad_w, kj * a.dilation_w, &ow0, &ow1);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t oh = 0; oh < a.out_h; ++oh) {
        const int64_t ih = oh * a.stride_h - a.pad_h + ki * a.dilation_h;
        if (ih < 0 || ih >= a.h) continue;
        const T* src = cols + r * ld + i * d.positions + oh * a.out_w;
        T* row = x + i * d.image_in + (c * a.h + ih) * a.w;
        const int64_t shift = kj * a.dilation_w - a.pad_w;
        if (a.stride_w == 1) {
          T* dst = row + shift + ow0;
          const T* from = src + ow0;
#pragma omp simd
          for (int64_t q = 0; q < ow1 - ow0; ++q) dst[q] += from[q];
        } else {
          for (int64_t ow = ow0; ow < ow1; ++ow) row[ow * a.stride_w + shift] += src[ow];
        }
      }
  }
}

template <typename T>
void conv2d_forward(const Conv2dGeometry& a, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv_winograd_usable(a)) return conv_winograd_forward(a, x, w, bias, y);
    if (conv_direct_usable(a)) return conv_direct_forward(a, x, w, bias, y);
  }
  const Dims d = dims_of(a);
  const int64_t group = group_size<T>(d);
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n += group) {
      const int64_t count = std::min(group, end - n), ld = count * d.positions;
      T* cols = scratch<T>(0, static_cast<size_t>(d.rows * ld));
      im2col_group(a, x + n * d.image_in, count, cols);
      // (O, count*P) = w (O, rows) x cols (rows, count*P); one image writes y directly.
      T* out = count == 1 ? y + n * d.image_out : scratch<T>(1, static_cast<size_t>(a.o * ld));
      gemm_blas(false, false, a.o, ld, d.rows, T(1), w, d.rows, cols, ld, T(0), out, ld);
      for (int64_t i = 0; i < count; ++i)
        for (int64_t k = 0; k < a.o; ++k) {
          const T* src = out + k * ld + i * d.positions;
          T* dst = y + (n + i) * d.image_out + k * d.positions;
          const T b = bias ? bias[k] : T(0);
#pragma omp simd
          for (int64_t q = 0; q < d.positions; ++q) dst[q] = src[q] + b;
        }
    }
  });
}

template <typename T>
void conv2d_backward_input(const Conv2dGeometry& a, const T* grad_out, const T* w, T* grad_in) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv_winograd_backward_input_usable(a))
      return conv_winograd_backward_input(a, grad_out, w, grad_in);
    if (conv_direct_usable(a) && conv_direct_backward_input_usable(a))
      return conv_direct_backward_input(a, grad_out, w, grad_in);
  }
  const Dims d = dims_of(a);
  const int64_t group = group_size<T>(d, kBackwardInputColumnsBudget);
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; n += group) {
      const int64_t count = std::min(group, end - n), ld = count * d.positions;
      const T* g = grad_out + n * d.image_out;
      if (count > 1) {
        T* gathered = scratch<T>(1, static_cast<size_t>(a.o * ld));
        gather_outputs(d, a.o, g, count, gathered);
        g = gathered;
      }
      // cols (rows, count*P) = w^T (rows, O) x grad_out (O, count*P); col2im sums them back.
      T* cols = scratch<T>(0, static_cast<size_t>(d.rows * ld));
      gemm_blas(true, false, d.rows, ld, a.o, T(1), w, d.rows, g, ld, T(0), cols, ld);
      col2im_group(a, cols, count, grad_in + n * d.image_in);
    }
  });
}

bool conv2d_backward_input_adds(const Conv2dGeometry& a) {
  if (conv_winograd_backward_input_usable(a)) return conv_winograd_backward_input_adds(a);
  return conv_direct_backward_input_adds(a);  // the direct path, and its AVX-512 kernel
}

void conv2d_backward_input_add(const Conv2dGeometry& a, const float* grad_out, const float* w,
                               float* grad_in) {
  // The path conv2d_backward_input<float> takes: Winograd first wherever it is usable.
  if (conv_winograd_backward_input_usable(a))
    return conv_winograd_backward_input(a, grad_out, w, grad_in, /*accumulate=*/true);
  conv_direct_backward_input_add(a, grad_out, w, grad_in);
}

template <typename T>
void conv2d_backward_weight(const Conv2dGeometry& a, const T* grad_out, const T* x, T* grad_w) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv_winograd_usable(a)) return conv_winograd_backward_weight(a, grad_out, x, grad_w);
    if (conv_direct_usable(a)) return conv_direct_backward_weight(a, grad_out, x, grad_w);
  }
  const Dims d = dims_of(a);
  const int64_t group = group_size<T>(d), weights = a.o * d.rows;
  const int64_t chunks = chunk_count(a.n, 1);
  if (chunks == 0) {
    std::fill(grad_w, grad_w + weights, T(0));  // an empty batch has a zero gradient
    return;
  }
  // Chunk 0 accumulates into grad_w itself, the others into partials summed below.
  T* partials = chunks > 1 ? scratch<T>(2, static_cast<size_t>((chunks - 1) * weights)) : nullptr;
  parallel_chunks(a.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    T* acc = chunk == 0 ? grad_w : partials + (chunk - 1) * weights;
    for (int64_t n = begin; n < end; n += group) {
      const int64_t count = std::min(group, end - n), ld = count * d.positions;
      T* cols = scratch<T>(0, static_cast<size_t>(d.rows * ld));
      im2col_group(a, x + n * d.image_in, count, cols);
      const T* g = grad_out + n * d.image_out;
      if (count > 1) {
        T* gathered = scratch<T>(1, static_cast<size_t>(a.o * ld));
        gather_outputs(d, a.o, g, count, gathered);
        g = gathered;
      }
      // grad_w (O, rows) (+)= grad_out (O, count*P) x cols^T (count*P, rows)
      const T beta = n == begin ? T(0) : T(1);
      gemm_blas(false, true, a.o, d.rows, ld, T(1), g, ld, cols, ld, beta, acc, d.rows);
    }
  });
  for (int64_t c = 1; c < chunks; ++c) {
    const T* part = partials + (c - 1) * weights;
#pragma omp simd
    for (int64_t i = 0; i < weights; ++i) grad_w[i] += part[i];
  }
}

namespace {
template <typename T>
T plane_sum(const T* plane, int64_t positions) {
  T sum = T(0);
#pragma omp simd reduction(+ : sum)
  for (int64_t q = 0; q < positions; ++q) sum += plane[q];
  return sum;
}
}  // namespace

template <typename T>
void conv2d_backward_bias(const Conv2dGeometry& a, const T* grad_out, T* grad_bias) {
  const int64_t positions = a.out_h * a.out_w;
  // Each plane summed in T (vectorised), a channel's plane sums added in double in image order.
  // The planes are walked in memory order (one stream; channel by channel, a channel's N planes
  // lie O planes apart): the same sums, 2.7-3.1x faster at 13x13 to 32x32 planes, 1.2-1.5x at
  // 8x8, 1 thread (bench/RESULTS.md, gpu22).
  std::vector<double> acc(static_cast<size_t>(a.o), 0.0);
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t k = 0; k < a.o; ++k)
      acc[static_cast<size_t>(k)] +=
          static_cast<double>(plane_sum(grad_out + (n * a.o + k) * positions, positions));
  for (int64_t k = 0; k < a.o; ++k) grad_bias[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
}

template <typename T>
void conv2d_relu_backward_bias(const Conv2dGeometry& a, const T* grad_out, const T* relu_out,
                               T* masked, T* grad_bias) {
  const int64_t positions = a.out_h * a.out_w;
  // Planes in memory order (three streams the prefetcher follows; a channel's N planes lie
  // O planes apart), each channel's plane sums still added in image order, as
  // conv2d_backward_bias adds them: the same double sums.
  std::vector<double> acc(static_cast<size_t>(a.o), 0.0);
  for (int64_t n = 0; n < a.n; ++n)
    for (int64_t k = 0; k < a.o; ++k) {
      const int64_t at = (n * a.o + k) * positions;
      const T *g = grad_out + at, *y = relu_out + at;
      T* out = masked + at;
      // Both loads unconditional: a select the loop vectorises (g[q] loaded only where y[q] > 0
      // compiled to a branch, mispredicted on a ReLU's random signs: 6-12x slower, measured).
#pragma omp simd
      for (int64_t q = 0; q < positions; ++q) {
        const T d = g[q], v = y[q];
        out[q] = v > T(0) ? d : T(0);
      }
      acc[static_cast<size_t>(k)] += static_cast<double>(plane_sum(out, positions));  // in cache
    }
  for (int64_t k = 0; k < a.o; ++k) grad_bias[k] = static_cast<T>(acc[static_cast<size_t>(k)]);
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_FAST_CONV(T)                                                             \
  template void conv2d_forward<T>(const Conv2dGeometry&, const T*, const T*, const T*, T*);      \
  template void conv2d_backward_input<T>(const Conv2dGeometry&, const T*, const T*, T*);         \
  template void conv2d_backward_weight<T>(const Conv2dGeometry&, const T*, const T*, T*);        \
  template void conv2d_backward_bias<T>(const Conv2dGeometry&, const T*, T*);                    \
  template void conv2d_relu_backward_bias<T>(const Conv2dGeometry&, const T*, const T*, T*, T*); \
  template void im2col_group<T>(const Conv2dGeometry&, const T*, int64_t, T*);                   \
  template void col2im_group<T>(const Conv2dGeometry&, const T*, int64_t, T*);
ECH_INSTANTIATE_FAST_CONV(float)
ECH_INSTANTIATE_FAST_CONV(double)
#undef ECH_INSTANTIATE_FAST_CONV
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu::fast
