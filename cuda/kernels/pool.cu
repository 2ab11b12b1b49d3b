// Pooling kernels. Why: one thread per output element for the forwards (each window is small);
// average backward gathers per input pixel over the windows that cover it (deterministic, no
// atomics); max backward scatters through argmax with atomicAdd because only argmax, not the
// window geometry, reaches it (overlapping windows may pick the same pixel).
#include <echelon/cuda/kernels/pool.h>

#include <echelon/cuda/launch.h>

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

struct Window {
  int64_t h0, h1, w0, w1, divisor;
};

// Same rules as the CPU twin (tensor/cpu/pool.cpp): clipped window and PyTorch's divisor.
__device__ Window window_of(const Pool2dGeometry& a, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * a.stride_h - a.pad_h, w0 = ow * a.stride_w - a.pad_w;
  const int64_t h1 = min(h0 + a.kernel_h, a.h + a.pad_h), w1 = min(w0 + a.kernel_w, a.w + a.pad_w);
  Window win{max(h0, int64_t{0}), min(h1, a.h), max(w0, int64_t{0}), min(w1, a.w), 0};
  win.divisor = a.count_include_pad ? (h1 - h0) * (w1 - w0) : (win.h1 - win.h0) * (win.w1 - win.w0);
  return win;
}

#define ECH_GRID_STRIDE(i, total)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (total); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// relu_first: every element is read through the ReLU (x > 0 ? x : 0, NaN -> 0), so y and argmax
// are max_pool2d(relu(x))'s bit for bit and relu(x) is never stored.
__global__ void max_pool2d_forward_kernel(Pool2dGeometry a, const float* x, float* y,
                                          int64_t* argmax, bool relu_first) {
  const int64_t total = a.n * a.c * a.out_h * a.out_w;
  ECH_GRID_STRIDE(i, total) {
    const int64_t ow = i % a.out_w, oh = (i / a.out_w) % a.out_h, p = i / (a.out_w * a.out_h);
    const float* plane = x + p * a.h * a.w;
    const auto read = [plane, relu_first](int64_t j) {
      const float v = plane[j];
      return relu_first && !(v > 0.0f) ? 0.0f : v;
    };
    const Window win = window_of(a, oh, ow);
    int64_t best = win.h0 * a.w + win.w0;
    float best_value = read(best);
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const float v = read(ih * a.w + iw);
        if (v > best_value || isnan(v)) best = ih * a.w + iw, best_value = v;
      }
    y[i] = best_value;
    argmax[i] = best;
  }
}

__global__ void max_pool2d_backward_kernel(Pool2dGeometry a, const float* grad_out,
                                           const int64_t* argmax, float* grad_in) {
  const int64_t out_plane = a.out_h * a.out_w, in_plane = a.h * a.w;
  const int64_t total = a.n * a.c * out_plane;
  ECH_GRID_STRIDE(i, total) {
    const int64_t idx = argmax[i];
    if (idx >= 0 && idx < in_plane)
      atomicAdd(grad_in + (i / out_plane) * in_plane + idx, grad_out[i]);
  }
}

__global__ void avg_pool2d_forward_kernel(Pool2dGeometry a, const float* x, float* y) {
  const int64_t total = a.n * a.c * a.out_h * a.out_w;
  ECH_GRID_STRIDE(i, total) {
    const int64_t ow = i % a.out_w, oh = (i / a.out_w) % a.out_h, p = i / (a.out_w * a.out_h);
    const float* plane = x + p * a.h * a.w;
    const Window win = window_of(a, oh, ow);
    float acc = 0.0f;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) acc += plane[ih * a.w + iw];
    y[i] = acc / static_cast<float>(win.divisor);
  }
}

// Output rows whose window [oh*stride - pad, +kernel) covers input row `in`, within [0, out).
__device__ void covering(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                         int64_t* first, int64_t* last) {
  const int64_t lo = in + pad - kernel + 1;  // oh*stride >= lo
  *first = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  *last = min((in + pad) / stride, out - 1);
}

__global__ void avg_pool2d_backward_kernel(Pool2dGeometry a, const float* grad_out,
                                           float* grad_in) {
  const int64_t total = a.n * a.c * a.h * a.w;
  ECH_GRID_STRIDE(i, total) {
    const int64_t iw = i % a.w, ih = (i / a.w) % a.h, p = i / (a.w * a.h);
    int64_t oh0, oh1, ow0, ow1;
    covering(ih, a.kernel_h, a.stride_h, a.pad_h, a.out_h, &oh0, &oh1);
    covering(iw, a.kernel_w, a.stride_w, a.pad_w, a.out_w, &ow0, &ow1);
    float acc = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow)
        acc += grad_out[(p * a.out_h + oh) * a.out_w + ow] /
               static_cast<float>(window_of(a, oh, ow).divisor);
    grad_in[i] = acc;
  }
}

#undef ECH_GRID_STRIDE

}  // namespace

// ---- launchers
// ------------------------------------------------------------------------------------

void max_pool2d_forward(const Pool2dGeometry& a, const float* x, float* y, int64_t* argmax,
                        bool relu_first, cudaStream_t stream) {
  launch_1d("max_pool2d_forward", a.n * a.c * a.out_h * a.out_w, stream, max_pool2d_forward_kernel,
            a, x, y, argmax, relu_first);
}

void max_pool2d_backward(const Pool2dGeometry& a, const float* grad_out, const int64_t* argmax,
                         float* grad_in, cudaStream_t stream) {
  ECH_CUDA_CHECK(cudaMemsetAsync(
      grad_in, 0, static_cast<size_t>(a.n * a.c * a.h * a.w) * sizeof(float), stream));
  launch_1d("max_pool2d_backward", a.n * a.c * a.out_h * a.out_w, stream,
            max_pool2d_backward_kernel, a, grad_out, argmax, grad_in);
}

void avg_pool2d_forward(const Pool2dGeometry& a, const float* x, float* y, cudaStream_t stream) {
  launch_1d("avg_pool2d_forward", a.n * a.c * a.out_h * a.out_w, stream, avg_pool2d_forward_kernel,
            a, x, y);
}

void avg_pool2d_backward(const Pool2dGeometry& a, const float* grad_out, float* grad_in,
                         cudaStream_t stream) {
  launch_1d("avg_pool2d_backward", a.n * a.c * a.h * a.w, stream, avg_pool2d_backward_kernel, a,
            grad_out, grad_in);
}

}  // namespace echelon::cuda
