// Indexing kernels: index_select, gather, one_hot, the index range check, the resident-data
// batch assembly (augment_gather), and ResNet's option-A shortcut (pad_channels_subsample and
// its adjoint: one pass each way, where zeros and a strided copy were two launches and wrote
// the output one and a half times).
//
// One thread per OUTPUT element in every kernel: each output is written exactly once (no
// atomics, no races) and consecutive threads write consecutive addresses. Index values are
// validated by the dispatch layer with count_out_of_range before these run, so the kernels
// assume 0 <= index < size.
#include <echelon/cuda/kernels/shape.h>

#include <algorithm>
#include <cstdint>

#include <echelon/cuda/launch.h>
#include <echelon/kernels/fast_div.h>

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

// out (outer, num_index, inner) = x (outer, dim_size, inner)[:, index[k], :].
template <typename T>
__global__ void index_select_kernel(const T* x, const int64_t* index, T* out, int64_t dim_size,
                                    int64_t inner, int64_t num_index, int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t in = i % inner;
    const int64_t k = (i / inner) % num_index;
    const int64_t o = i / (inner * num_index);
    out[i] = x[(o * dim_size + index[k]) * inner + in];
  }
}

// out[o, k, i] = x[o, index[o, k, i], i].
template <typename T>
__global__ void gather_kernel(const T* x, const int64_t* index, T* out, int64_t dim_size,
                              int64_t inner, int64_t index_size, int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t in = i % inner;
    const int64_t o = i / (inner * index_size);
    out[i] = x[(o * dim_size + index[i]) * inner + in];
  }
}

template <typename T>
__global__ void one_hot_kernel(const int64_t* labels, T* out, int64_t num_classes, int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_step())
    out[i] = labels[i / num_classes] == i % num_classes ? T(1) : T(0);
}

// One thread per output element (b, c, y, x). The multiply and add are rounded separately
// (__fmul_rn, __fadd_rn: no fused multiply-add), as the CPU's to_float computes them.
// __grid_constant__: a.scale[c] and a.shift[c] are read where the argument lies; a by-value struct
// indexed at run time would be copied to local memory (80 bytes a thread, tools/cuda-resources.py).
__global__ void augment_gather_kernel(const __grid_constant__ AugmentGatherArgs a,
                                      const uint8_t* images, const int32_t* plan, float* out,
                                      int64_t total) {
  for (int64_t i = grid_start(); i < total; i += grid_step()) {
    const int64_t x = i % a.width, y = (i / a.width) % a.height;
    const int64_t c = (i / (a.width * a.height)) % a.channels;
    const int32_t* row = plan + (i / (a.width * a.height * a.channels)) * kPlanColumns;
    const int64_t src_y = y + row[kPlanDy] - a.pad;
    const int64_t src_x = (row[kPlanFlip] ? a.width - 1 - x : x) + row[kPlanDx] - a.pad;
    const bool inside = src_y >= 0 && src_y < a.height && src_x >= 0 && src_x < a.width;
    const int64_t image = row[kPlanIndex];
    const uint8_t pixel =
        inside ? images[((image * a.channels + c) * a.height + src_y) * a.width + src_x] : 0;
    out[i] = __fadd_rn(__fmul_rn(static_cast<float>(pixel), a.scale[c]), a.shift[c]);
  }
}

__global__ void count_out_of_range_kernel(const int64_t* index, int64_t n, int64_t size,
                                          unsigned long long* count, int64_t* first_bad) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const int64_t value = index[i];
    if (value < 0 || value >= size) {
      atomicAdd(count, 1ull);
      *first_bad = value;  // racing aligned 64-bit stores: one of the bad values survives
    }
  }
}

// The option-A shortcut, one block per output plane (grid-stride over planes), its threads over
// the plane's pixels: one 32-bit FastDiv per element instead of 64-bit divisions. x (n, c, h, w)
// -> y (n, c + 2 pad, oh, ow); pad channels are zeros.
__global__ void pad_channels_subsample_kernel(const float* x, float* y, int64_t planes, int c,
                                              int pad, int h, int w, int stride, FastDiv by_ow,
                                              int plane) {
  const int out_c = c + 2 * pad;
  for (int64_t at = blockIdx.x; at < planes; at += gridDim.x) {
    const int64_t image = at / out_c;
    const int k = static_cast<int>(at - image * out_c) - pad;
    float* const dst = y + at * plane;
    if (k < 0 || k >= c) {
      for (int i = threadIdx.x; i < plane; i += blockDim.x) dst[i] = 0.0f;
      continue;
    }
    const float* const src = x + (image * c + k) * static_cast<int64_t>(h) * w;
    for (int i = threadIdx.x; i < plane; i += blockDim.x) {
      int a, b;
      by_ow.divmod(i, a, b);
      dst[i] = src[static_cast<int64_t>(stride) * a * w + stride * b];
    }
  }
}

// Its adjoint, one block per grad_in plane: g (n, c + 2 pad, oh, ow) -> gx (n, c, h, w).
__global__ void pad_channels_subsample_backward_kernel(const float* g, float* gx, int64_t planes,
                                                       int c, int pad, int oh, int ow, int stride,
                                                       FastDiv by_w, int plane) {
  for (int64_t at = blockIdx.x; at < planes; at += gridDim.x) {
    const int64_t image = at / c;
    const int k = static_cast<int>(at - image * c);
    const float* const src = g + (image * (c + 2 * pad) + pad + k) * static_cast<int64_t>(oh) * ow;
    float* const dst = gx + at * plane;
    for (int i = threadIdx.x; i < plane; i += blockDim.x) {
      int p, q;
      by_w.divmod(i, p, q);
      dst[i] = p % stride == 0 && q % stride == 0 ? src[p / stride * ow + q / stride] : 0.0f;
    }
  }
}

// Threads for planes of `pixels`: a whole number of warps, at most kBlock.
unsigned plane_threads(int64_t pixels) {
  return static_cast<unsigned>(std::clamp<int64_t>((pixels + 31) / 32 * 32, 32, kBlock));
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void index_select(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
                  int64_t inner, int64_t num_index, cudaStream_t stream) {
  const int64_t total = outer * num_index * inner;
  launch_1d("index_select", total, stream, index_select_kernel<T>, x, index, out, dim_size, inner,
            num_index, total);
}

template <typename T>
void gather(const T* x, const int64_t* index, T* out, int64_t outer, int64_t dim_size,
            int64_t inner, int64_t index_size, cudaStream_t stream) {
  const int64_t total = outer * index_size * inner;
  launch_1d("gather", total, stream, gather_kernel<T>, x, index, out, dim_size, inner, index_size,
            total);
}

template <typename T>
void one_hot(const int64_t* labels, T* out, int64_t n, int64_t num_classes, cudaStream_t stream) {
  const int64_t total = n * num_classes;
  launch_1d("one_hot", total, stream, one_hot_kernel<T>, labels, out, num_classes, total);
}

void count_out_of_range(const int64_t* index, int64_t n, int64_t size, int64_t* count,
                        int64_t* first_bad, cudaStream_t stream) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long));
  ECH_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), stream));
  launch_1d("count_out_of_range", n, stream, count_out_of_range_kernel, index, n, size,
            reinterpret_cast<unsigned long long*>(count), first_bad);
}

void pad_channels_subsample(const float* x, float* y, int64_t n, int64_t c, int64_t h, int64_t w,
                            int64_t pad, int64_t stride, cudaStream_t stream) {
  const int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  const int64_t planes = n * (c + 2 * pad), plane = oh * ow;
  if (planes <= 0 || plane <= 0) return;
  const auto narrow = [](int64_t v) { return static_cast<int>(v); };
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(planes, max_grid_blocks()));
  ECH_LAUNCH_NAMED("pad_channels_subsample", blocks, plane_threads(plane), 0, stream,
                   pad_channels_subsample_kernel)
  (x, y, planes, narrow(c), narrow(pad), narrow(h), narrow(w), narrow(stride), FastDiv(narrow(ow)),
   narrow(plane));
  ECH_CUDA_CHECK_LAUNCH("pad_channels_subsample");
}

void pad_channels_subsample_backward(const float* g, float* gx, int64_t n, int64_t c, int64_t h,
                                     int64_t w, int64_t pad, int64_t stride, cudaStream_t stream) {
  const int64_t oh = (h + stride - 1) / stride, ow = (w + stride - 1) / stride;
  const int64_t planes = n * c, plane = h * w;
  if (planes <= 0 || plane <= 0) return;
  const auto narrow = [](int64_t v) { return static_cast<int>(v); };
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(planes, max_grid_blocks()));
  ECH_LAUNCH_NAMED("pad_channels_subsample_backward", blocks, plane_threads(plane), 0, stream,
                   pad_channels_subsample_backward_kernel)
  (g, gx, planes, narrow(c), narrow(pad), narrow(oh), narrow(ow), narrow(stride),
   FastDiv(narrow(w)), narrow(plane));
  ECH_CUDA_CHECK_LAUNCH("pad_channels_subsample_backward");
}

void augment_gather(const AugmentGatherArgs& a, const uint8_t* images, const int32_t* plan,
                    float* out, cudaStream_t stream) {
  const int64_t total = a.batch * a.channels * a.height * a.width;
  launch_1d("augment_gather", total, stream, augment_gather_kernel, a, images, plan, out, total);
}

template void index_select<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                                  int64_t, cudaStream_t);
template void index_select<int64_t>(const int64_t*, const int64_t*, int64_t*, int64_t, int64_t,
                                    int64_t, int64_t, cudaStream_t);
template void gather<float>(const float*, const int64_t*, float*, int64_t, int64_t, int64_t,
                            int64_t, cudaStream_t);
template void one_hot<float>(const int64_t*, float*, int64_t, int64_t, cudaStream_t);

}  // namespace echelon::cuda
