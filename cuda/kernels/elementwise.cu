// Elementwise kernels: unary/binary maps, fills, casts, axpy, clamp and the finite check.
//
// Why one grid-stride kernel per op family with a runtime switch on the op: the op is uniform
// across a launch (no divergence), and one instantiation per dtype keeps nvcc time low. Inputs
// are read through StridedIndexer (the output's sizes, the input's strides, 0 on broadcast dims),
// so broadcasts and non-contiguous views need no copy; outputs are contiguous unless noted.
// The formulas match the CPU twins in tensor/cpu/elementwise.cpp; parity is checked by
// tests/support/parity.cpp.
#include <echelon/cuda/kernels/elementwise.h>

#include <cstdint>

#include <echelon/cuda/launch.h>
#include <echelon/kernels/cast.h>

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

__device__ __forceinline__ float apply_unary(UnaryOp op, float x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return fabsf(x);
    case UnaryOp::Exp:
      return expf(x);
    case UnaryOp::Log:
      return logf(x);
    case UnaryOp::Sqrt:
      return sqrtf(x);
    case UnaryOp::Relu:
      return x > 0.0f ? x : 0.0f;
    case UnaryOp::Tanh:
      return tanhf(x);
    case UnaryOp::Sigmoid:
      return 1.0f / (1.0f + expf(-x));
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Reciprocal:
      return 1.0f / x;
  }
  return x;
}

// d op(x)/dx times g, from x or y = op(x) as tensor/ops.h documents for each op.
__device__ __forceinline__ float apply_unary_backward(UnaryOp op, float g, float x, float y) {
  switch (op) {
    case UnaryOp::Neg:
      return -g;
    case UnaryOp::Abs:
      return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f);
    case UnaryOp::Exp:
      return g * y;
    case UnaryOp::Log:
      return g / x;
    case UnaryOp::Sqrt:
      return g / (2.0f * sqrtf(x));
    case UnaryOp::Relu:
      return x > 0.0f ? g : 0.0f;
    case UnaryOp::Tanh:
      return g * (1.0f - y * y);
    case UnaryOp::Sigmoid:
      return g * y * (1.0f - y);
    case UnaryOp::Square:
      return 2.0f * x * g;
    case UnaryOp::Reciprocal:
      return -g / (x * x);
  }
  return g;
}

// Max/Min propagate NaN (as PyTorch's maximum/minimum do).
__device__ __forceinline__ float apply_binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Max:
      return (a > b || isnan(a)) ? a : b;
    case BinaryOp::Min:
      return (a < b || isnan(a)) ? a : b;
    case BinaryOp::Pow:
      return powf(a, b);
  }
  return a;
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    y[i] = apply_unary(op, x[strided_offset(x_ix, i)]);
}

template <typename T>
__global__ void unary_backward_kernel(UnaryOp op, const T* grad_out, const T* x, const T* y,
                                      T* grad_in, int64_t n) {
  // x or y may be unused by `op`; the caller still passes both (tensor/ops.h), so both are valid.
  for (int64_t i = grid_start(); i < n; i += grid_step())
    grad_in[i] = apply_unary_backward(op, grad_out[i], x[i], y[i]);
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b,
                              StridedIndexer b_ix, T* out, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = apply_binary(op, a[strided_offset(a_ix, i)], b[strided_offset(b_ix, i)]);
}

template <typename T>
__global__ void binary_scalar_kernel(BinaryOp op, const T* a, StridedIndexer a_ix, T s,
                                     bool scalar_first, T* out, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const T v = a[strided_offset(a_ix, i)];
    out[i] = scalar_first ? apply_binary(op, s, v) : apply_binary(op, v, s);
  }
}

template <typename T>
__global__ void eq_kernel(const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix,
                          float* out, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = a[strided_offset(a_ix, i)] == b[strided_offset(b_ix, i)] ? 1.0f : 0.0f;
}

template <typename T>
__global__ void fill_kernel(T* out, StridedIndexer out_ix, T value, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) out[strided_offset(out_ix, i)] = value;
}

template <typename T>
__global__ void arange_kernel(T* out, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) out[i] = static_cast<T>(i);
}

template <typename Src, typename Dst>
__global__ void copy_cast_kernel(const Src* src, StridedIndexer src_ix, Dst* dst,
                                 StridedIndexer dst_ix, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    dst[strided_offset(dst_ix, i)] = cast_value<Dst>(src[strided_offset(src_ix, i)]);
}

template <typename T>
__global__ void axpy_kernel(T* dst, const T* src, T alpha, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) dst[i] += alpha * src[i];
}

template <typename T>
__global__ void clamp_kernel(const T* x, T* y, T lo, T hi, int64_t n) {
  // std::min(std::max(x, lo), hi) as in the CPU twin: NaN stays NaN (fminf/fmaxf would turn it
  // into lo and hide it from the non-finite check).
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const T low = x[i] < lo ? lo : x[i];
    y[i] = hi < low ? hi : low;
  }
}

template <typename T>
__global__ void count_nonfinite_kernel(const T* x, int64_t n, unsigned long long* count) {
  // Non-finite values are rare, so a per-element atomic costs nothing in the common case.
  for (int64_t i = grid_start(); i < n; i += grid_step())
    if (!isfinite(x[i])) atomicAdd(count, 1ull);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void unary(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n, cudaStream_t stream) {
  launch_1d("unary", n, stream, unary_kernel<T>, op, x, x_ix, y, n);
}

template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n,
                    cudaStream_t stream) {
  launch_1d("unary_backward", n, stream, unary_backward_kernel<T>, op, grad_out, x, y, grad_in, n);
}

template <typename T>
void binary(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, T* out,
            int64_t n, cudaStream_t stream) {
  launch_1d("binary", n, stream, binary_kernel<T>, op, a, a_ix, b, b_ix, out, n);
}

template <typename T>
void binary_scalar(BinaryOp op, const T* a, StridedIndexer a_ix, T s, bool scalar_first, T* out,
                   int64_t n, cudaStream_t stream) {
  launch_1d("binary_scalar", n, stream, binary_scalar_kernel<T>, op, a, a_ix, s, scalar_first, out,
            n);
}

template <typename T>
void eq(const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, float* out, int64_t n,
        cudaStream_t stream) {
  launch_1d("eq", n, stream, eq_kernel<T>, a, a_ix, b, b_ix, out, n);
}

template <typename T>
void fill(T* out, StridedIndexer out_ix, T value, int64_t n, cudaStream_t stream) {
  launch_1d("fill", n, stream, fill_kernel<T>, out, out_ix, value, n);
}

template <typename T>
void arange(T* out, int64_t n, cudaStream_t stream) {
  launch_1d("arange", n, stream, arange_kernel<T>, out, n);
}

template <typename Src, typename Dst>
void copy_cast(const Src* src, StridedIndexer src_ix, Dst* dst, StridedIndexer dst_ix, int64_t n,
               cudaStream_t stream) {
  launch_1d("copy_cast", n, stream, copy_cast_kernel<Src, Dst>, src, src_ix, dst, dst_ix, n);
}

template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n, cudaStream_t stream) {
  launch_1d("axpy", n, stream, axpy_kernel<T>, dst, src, alpha, n);
}

template <typename T>
void clamp(const T* x, T* y, T lo, T hi, int64_t n, cudaStream_t stream) {
  launch_1d("clamp", n, stream, clamp_kernel<T>, x, y, lo, hi, n);
}

template <typename T>
void count_nonfinite(const T* x, int64_t n, int64_t* count, cudaStream_t stream) {
  static_assert(sizeof(int64_t) == sizeof(unsigned long long));
  ECH_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int64_t), stream));
  launch_1d("count_nonfinite", n, stream, count_nonfinite_kernel<T>, x, n,
            reinterpret_cast<unsigned long long*>(count));
}

template void unary<float>(UnaryOp, const float*, StridedIndexer, float*, int64_t, cudaStream_t);
template void unary_backward<float>(UnaryOp, const float*, const float*, const float*, float*,
                                    int64_t, cudaStream_t);
template void binary<float>(BinaryOp, const float*, StridedIndexer, const float*, StridedIndexer,
                            float*, int64_t, cudaStream_t);
template void binary_scalar<float>(BinaryOp, const float*, StridedIndexer, float, bool, float*,
                                   int64_t, cudaStream_t);
template void axpy<float>(float*, const float*, float, int64_t, cudaStream_t);
template void clamp<float>(const float*, float*, float, float, int64_t, cudaStream_t);
template void count_nonfinite<float>(const float*, int64_t, int64_t*, cudaStream_t);

#define ECH_INSTANTIATE_INDEXED(T)                                                         \
  template void eq<T>(const T*, StridedIndexer, const T*, StridedIndexer, float*, int64_t, \
                      cudaStream_t);                                                       \
  template void fill<T>(T*, StridedIndexer, T, int64_t, cudaStream_t);
ECH_INSTANTIATE_INDEXED(float)
ECH_INSTANTIATE_INDEXED(int32_t)
ECH_INSTANTIATE_INDEXED(int64_t)
ECH_INSTANTIATE_INDEXED(uint8_t)
#undef ECH_INSTANTIATE_INDEXED

template void arange<float>(float*, int64_t, cudaStream_t);
template void arange<int32_t>(int32_t*, int64_t, cudaStream_t);
template void arange<int64_t>(int64_t*, int64_t, cudaStream_t);

#define ECH_INSTANTIATE_COPY(Src, Dst)                                                         \
  template void copy_cast<Src, Dst>(const Src*, StridedIndexer, Dst*, StridedIndexer, int64_t, \
                                    cudaStream_t);
#define ECH_INSTANTIATE_COPY_FROM(Src) \
  ECH_INSTANTIATE_COPY(Src, float)     \
  ECH_INSTANTIATE_COPY(Src, int32_t)   \
  ECH_INSTANTIATE_COPY(Src, int64_t)   \
  ECH_INSTANTIATE_COPY(Src, uint8_t)
ECH_INSTANTIATE_COPY_FROM(float)
ECH_INSTANTIATE_COPY_FROM(int32_t)
ECH_INSTANTIATE_COPY_FROM(int64_t)
ECH_INSTANTIATE_COPY_FROM(uint8_t)
#undef ECH_INSTANTIATE_COPY_FROM
#undef ECH_INSTANTIATE_COPY

}  // namespace echelon::cuda
