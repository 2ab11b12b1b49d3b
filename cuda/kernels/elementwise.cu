// Elementwise kernels: unary/binary maps, fills, casts, axpy, clamp and the finite check.
//
// Why one grid-stride kernel per op family with a runtime switch on the op: the op is uniform
// across a launch (no divergence), and one instantiation per dtype keeps nvcc time low. Inputs
// are read through StridedIndexer (the output's sizes, the input's strides, 0 on broadcast dims),
// so broadcasts and non-contiguous views need no copy; outputs are contiguous unless noted.
// Contiguous fast path: when every operand is contiguous (activations and gradients almost
// always are), the float maps skip the indexer's division chain and, when every pointer is
// 16-byte aligned, move 4 floats per load and store (128-bit transactions); a scalar loop covers
// the tail and misaligned views. The formulas match the CPU twins in tensor/cpu/elementwise.cpp;
// parity is checked by tests/support/parity.cpp.
#include <echelon/cuda/kernels/elementwise.h>

#include <cstdint>
#include <type_traits>

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

// T: float, or bfloat16 (each element widened to float, the result rounded to nearest even as it
// is stored: kernels/cast.h, as the CPU twin).
template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    y[i] = cast_value<T>(apply_unary(op, cast_value<float>(x[strided_offset(x_ix, i)])));
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b,
                              StridedIndexer b_ix, T* out, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = cast_value<T>(apply_binary(op, cast_value<float>(a[strided_offset(a_ix, i)]),
                                        cast_value<float>(b[strided_offset(b_ix, i)])));
}

// The bfloat16 unary backward (float takes the contiguous map below); all four contiguous (n).
template <typename T>
__global__ void unary_backward_kernel(UnaryOp op, const T* grad_out, const T* x, const T* y,
                                      T* grad_in, int64_t n) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    grad_in[i] = cast_value<T>(apply_unary_backward(
        op, cast_value<float>(grad_out[i]), cast_value<float>(x[i]), cast_value<float>(y[i])));
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

// ---- contiguous fast path: out[i] = f(in_0[i], ..., in_{k-1}[i]) ------------------------------

constexpr int kVec = 4;  // floats per 16-byte vector

template <int kArity>
struct Operands {
  const float* in[kArity];  // each (n), contiguous
};

// 8 resident blocks (64 warps, the SM's whole thread capacity; at most 32 registers): the
// 3-operand map took 42 registers (5 blocks), the 2-operand one 35 (6); ptxas fits every Map in
// 32 without spilling (tools/cuda-resources.py). A hypothesis for the GPU run: more warps in
// flight for a bandwidth-bound loop.
template <typename Map, int kArity>
__global__ void __launch_bounds__(kBlock, 8)
    map_contiguous_kernel(Map f, Operands<kArity> ops, float* out, int64_t n, bool vectorised) {
  const int64_t n_vec = vectorised ? n / kVec : 0;
  for (int64_t v = grid_start(); v < n_vec; v += grid_step()) {
    float lanes[kArity][kVec];
#pragma unroll
    for (int a = 0; a < kArity; ++a) {
      const float4 q = reinterpret_cast<const float4*>(ops.in[a])[v];
      lanes[a][0] = q.x, lanes[a][1] = q.y, lanes[a][2] = q.z, lanes[a][3] = q.w;
    }
    float r[kVec];
#pragma unroll
    for (int l = 0; l < kVec; ++l) {
      float args[kArity];
#pragma unroll
      for (int a = 0; a < kArity; ++a) args[a] = lanes[a][l];
      r[l] = f(args);
    }
    reinterpret_cast<float4*>(out)[v] = make_float4(r[0], r[1], r[2], r[3]);
  }
  // The tail (fewer than kVec elements), or everything when a pointer is misaligned.
  for (int64_t i = n_vec * kVec + grid_start(); i < n; i += grid_step()) {
    float args[kArity];
    for (int a = 0; a < kArity; ++a) args[a] = ops.in[a][i];
    out[i] = f(args);
  }
}

struct UnaryMap {
  UnaryOp op;
  __device__ float operator()(const float* v) const { return apply_unary(op, v[0]); }
};
struct UnaryBackwardMap {  // (grad_out, x, y)
  UnaryOp op;
  __device__ float operator()(const float* v) const {
    return apply_unary_backward(op, v[0], v[1], v[2]);
  }
};
struct BinaryMap {
  BinaryOp op;
  __device__ float operator()(const float* v) const { return apply_binary(op, v[0], v[1]); }
};
struct ScalarMap {
  BinaryOp op;
  float s;
  bool scalar_first;
  __device__ float operator()(const float* v) const {
    return scalar_first ? apply_binary(op, s, v[0]) : apply_binary(op, v[0], s);
  }
};
struct AxpyMap {  // (dst, src)
  float alpha;
  __device__ float operator()(const float* v) const { return v[0] + alpha * v[1]; }
};
struct ClampMap {
  float lo, hi;
  __device__ float operator()(const float* v) const {
    const float low = v[0] < lo ? lo : v[0];
    return hi < low ? hi : low;
  }
};

// y (rows, features) += bias broadcast over the rows, ReLU'd with relu; in place. A thread per
// element (a linear layer's output: thousands to a few hundred thousand elements), the column
// by one division: a launch, not the arithmetic, is what a small layer costs.
__global__ void add_row_bias_kernel(float* y, const float* bias, int64_t n, int64_t features,
                                    bool relu) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const float v = y[i] + bias[i % features];
    y[i] = !relu || v > 0.0f ? v : 0.0f;
  }
}

template <typename T>
__global__ void count_nonfinite_kernel(const T* x, int64_t n, unsigned long long* count) {
  // Non-finite values are rare, so a per-element atomic costs nothing in the common case.
  for (int64_t i = grid_start(); i < n; i += grid_step())
    if (!isfinite(x[i])) atomicAdd(count, 1ull);
}

bool is_contiguous(const StridedIndexer& ix) {
  // make_indexer merged every contiguous run of dims, so contiguous means one unit-stride dim.
  return ix.rank == 0 || (ix.rank == 1 && ix.strides[0] == 1);
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename Map, int kArity>
void launch_map(const char* op, Map f, Operands<kArity> in, float* out, int64_t n,
                cudaStream_t stream) {
  if (n <= 0) return;
  bool vectorised = aligned16(out);
  for (const float* p : in.in) vectorised = vectorised && aligned16(p);
  const int64_t items = vectorised ? n / kVec + n % kVec : n;
  ECH_LAUNCH_NAMED(op, grid_for(items), kBlock, 0, stream, map_contiguous_kernel<Map, kArity>)
  (f, in, out, n, vectorised);
  ECH_CUDA_CHECK_LAUNCH(op);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void unary(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>)
    if (is_contiguous(x_ix))
      return launch_map("unary", UnaryMap{op}, Operands<1>{{x}}, y, n, stream);
  launch_1d("unary", n, stream, unary_kernel<T>, op, x, x_ix, y, n);
}

template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n,
                    cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>)
    launch_map("unary_backward", UnaryBackwardMap{op}, Operands<3>{{grad_out, x, y}}, grad_in, n,
               stream);
  else
    launch_1d("unary_backward", n, stream, unary_backward_kernel<T>, op, grad_out, x, y, grad_in,
              n);
}

template <typename T>
void binary(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, T* out,
            int64_t n, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>)
    if (is_contiguous(a_ix) && is_contiguous(b_ix))
      return launch_map("binary", BinaryMap{op}, Operands<2>{{a, b}}, out, n, stream);
  launch_1d("binary", n, stream, binary_kernel<T>, op, a, a_ix, b, b_ix, out, n);
}

template <typename T>
void binary_scalar(BinaryOp op, const T* a, StridedIndexer a_ix, T s, bool scalar_first, T* out,
                   int64_t n, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>)
    if (is_contiguous(a_ix))
      return launch_map("binary_scalar", ScalarMap{op, s, scalar_first}, Operands<1>{{a}}, out, n,
                        stream);
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
  static_assert(std::is_same_v<T, float>);
  launch_map("axpy", AxpyMap{alpha}, Operands<2>{{dst, src}}, dst, n, stream);
}

void add_row_bias(float* y, const float* bias, int64_t rows, int64_t features, bool relu,
                  cudaStream_t stream) {
  launch_1d("add_row_bias", rows * features, stream, add_row_bias_kernel, y, bias, rows * features,
            features, relu);
}

template <typename T>
void clamp(const T* x, T* y, T lo, T hi, int64_t n, cudaStream_t stream) {
  static_assert(std::is_same_v<T, float>);
  launch_map("clamp", ClampMap{lo, hi}, Operands<1>{{x}}, y, n, stream);
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
// bfloat16: the maps the dispatch lets compute on it (ops::bf16_computes), by the strided kernels.
template void unary<bfloat16>(UnaryOp, const bfloat16*, StridedIndexer, bfloat16*, int64_t,
                              cudaStream_t);
template void unary_backward<bfloat16>(UnaryOp, const bfloat16*, const bfloat16*, const bfloat16*,
                                       bfloat16*, int64_t, cudaStream_t);
template void binary<bfloat16>(BinaryOp, const bfloat16*, StridedIndexer, const bfloat16*,
                               StridedIndexer, bfloat16*, int64_t, cudaStream_t);
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
// bfloat16 (storage only) converts to and from float32; other pairs go through float32.
ECH_INSTANTIATE_COPY(bfloat16, float)
ECH_INSTANTIATE_COPY(float, bfloat16)
ECH_INSTANTIATE_COPY(bfloat16, bfloat16)
#undef ECH_INSTANTIATE_COPY_FROM
#undef ECH_INSTANTIATE_COPY

}  // namespace echelon::cuda
