// Pooling kernels. Why: one thread per output element for the forwards (each window is small).
// The backwards gather per input pixel over the windows that cover it: each thread writes its own
// grad_in element (no atomics, no zero fill), deterministic. Max backward's gather
// (max_pool2d_backward_gather) takes the window's geometry and argmax and adds grad_out where
// argmax names the pixel, in ascending (oh, ow) from 0: the order in which its CPU twin
// (cpu::max_pool2d_backward, tensor/cpu/pool.cpp) scatters, so the two agree bit for bit even
// where windows overlap (AlexNet's 3x3 / stride 2). Given the pooled output of
// max_pool2d(relu(x)), it also applies ReLU's mask (y > 0 at the argmax), so relu_max_pool2d's
// backward is this one kernel. Callers with argmax but no window use the scatter
// (max_pool2d_backward: zero fill, then atomicAdd through argmax; float sums in any order).
// Max pooling 2x2 / stride 2 (LeNet, VGG, AlexNet-style nets), W % 4 == 0, x 16-byte aligned:
// each thread reads a float4 of both input rows (two independent 16-byte loads) and writes two
// outputs and their argmax. The generic kernel spent ~3 64-bit divisions and a clipped-window
// set-up per output (compute-bound: 0.44 of a copy on the H200); this one does two 32-bit
// divisions per pair of outputs. Bytes: x once (4n), y and int64 argmax (3n): ~0.9 of a copy
// is reachable by what bench/exp_gpu_kernels counts.
#include <echelon/cuda/kernels/pool.h>

#include <cstdint>

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

// a / b, in 32 bits when both fit (a 64-bit division costs several times more instructions).
__device__ __forceinline__ int64_t quotient(int64_t a, int64_t b) {
  return (a >> 31) == 0 && (b >> 31) == 0
             ? static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b))
             : a / b;
}

// One window's max in the generic kernel's order (first element first, a NaN always taken).
__device__ __forceinline__ void take(float v, int64_t at, float& best_value, int64_t& best) {
  if (v > best_value || isnan(v)) best = at, best_value = v;
}

// 2x2 / stride 2 / no padding, out_w = W / 2, out_h = H / 2, W % 4 == 0, x 16-byte aligned:
// pair p covers outputs (row, 2q) and (row, 2q + 1) of output row `row` = plane * out_h + oh.
__global__ void max_pool2d_2x2_kernel(Pool2dGeometry a, const float* x, float* y, int64_t* argmax,
                                      bool relu_first) {
  const int64_t quads = a.w / 4, pairs = a.n * a.c * a.out_h * quads;
  ECH_GRID_STRIDE(p, pairs) {
    const int64_t row = quotient(p, quads), q = p - row * quads;
    const int64_t plane = quotient(row, a.out_h), oh = row - plane * a.out_h;
    const int64_t top = (2 * oh) * a.w + 4 * q;  // in-plane index of the pair's first element
    const float4* in = reinterpret_cast<const float4*>(x + plane * a.h * a.w + top);
    float4 r0 = in[0], r1 = in[a.w / 4];  // rows 2oh and 2oh + 1: two loads in flight
    if (relu_first) {
      const auto relu = [](float v) { return v > 0.0f ? v : 0.0f; };  // NaN -> 0, as generic
      r0 = make_float4(relu(r0.x), relu(r0.y), relu(r0.z), relu(r0.w));
      r1 = make_float4(relu(r1.x), relu(r1.y), relu(r1.z), relu(r1.w));
    }
    float best_a = r0.x, best_b = r0.z;
    int64_t at_a = top, at_b = top + 2;
    take(r0.y, top + 1, best_a, at_a);
    take(r1.x, top + a.w, best_a, at_a);
    take(r1.y, top + a.w + 1, best_a, at_a);
    take(r0.w, top + 3, best_b, at_b);
    take(r1.z, top + a.w + 2, best_b, at_b);
    take(r1.w, top + a.w + 3, best_b, at_b);
    const int64_t out = row * a.out_w + 2 * q;
    y[out] = best_a, y[out + 1] = best_b;
    argmax[out] = at_a, argmax[out + 1] = at_b;
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
  *first = lo <= 0 ? 0 : quotient(lo + stride - 1, stride);
  *last = min(quotient(in + pad, stride), out - 1);
}

// Thread per input pixel: the sum, from 0 in ascending (oh, ow), of grad_out over the covering
// windows whose argmax is this pixel and, with relu_out (the pooled relu(x)), whose relu_out > 0.
// An argmax outside its own window matches no covering window there: its term is dropped.
__global__ void max_pool2d_backward_gather_kernel(Pool2dGeometry a, const float* grad_out,
                                                  const int64_t* argmax, const float* relu_out,
                                                  float* grad_in) {
  const int64_t total = a.n * a.c * a.h * a.w;
  // stride == kernel, no padding (2x2 / stride 2): the one covering window is a division away.
  const bool disjoint =
      a.stride_h == a.kernel_h && a.stride_w == a.kernel_w && a.pad_h == 0 && a.pad_w == 0;
  ECH_GRID_STRIDE(i, total) {
    const int64_t row = quotient(i, a.w), iw = i - row * a.w;  // row = plane * h + ih
    const int64_t plane = quotient(row, a.h), ih = row - plane * a.h;
    int64_t oh0, oh1, ow0, ow1;
    if (disjoint) {
      oh0 = quotient(ih, a.kernel_h), ow0 = quotient(iw, a.kernel_w);
      oh1 = min(oh0, a.out_h - 1), ow1 = min(ow0, a.out_w - 1);  // past them: no window
    } else {
      covering(ih, a.kernel_h, a.stride_h, a.pad_h, a.out_h, &oh0, &oh1);
      covering(iw, a.kernel_w, a.stride_w, a.pad_w, a.out_w, &ow0, &ow1);
    }
    const int64_t at = ih * a.w + iw;
    float acc = 0.0f;
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const int64_t out_row = (plane * a.out_h + oh) * a.out_w;
      for (int64_t o = out_row + ow0; o <= out_row + ow1; ++o)
        if (argmax[o] == at && (relu_out == nullptr || relu_out[o] > 0.0f)) acc += grad_out[o];
    }
    grad_in[i] = acc;
  }
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
  const bool two_by_two = a.kernel_h == 2 && a.kernel_w == 2 && a.stride_h == 2 &&
                          a.stride_w == 2 && a.pad_h == 0 && a.pad_w == 0 && a.w % 4 == 0 &&
                          a.out_w * 2 == a.w && a.out_h == a.h / 2 &&
                          reinterpret_cast<uintptr_t>(x) % 16 == 0;
  if (two_by_two) {
    launch_1d("max_pool2d_forward (2x2)", a.n * a.c * a.out_h * (a.w / 4), stream,
              max_pool2d_2x2_kernel, a, x, y, argmax, relu_first);
    return;
  }
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

void max_pool2d_backward_gather(const Pool2dGeometry& a, const float* grad_out,
                                const int64_t* argmax, float* grad_in, const float* relu_out,
                                cudaStream_t stream) {
  launch_1d("max_pool2d_backward_gather", a.n * a.c * a.h * a.w, stream,
            max_pool2d_backward_gather_kernel, a, grad_out, argmax, relu_out, grad_in);
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
