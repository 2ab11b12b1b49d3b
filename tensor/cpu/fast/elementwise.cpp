#include <echelon/tensor/cpu/fast/elementwise.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

namespace echelon::cpu::fast {
namespace {

constexpr int64_t kGrain = int64_t{1} << 15;  // elements per task: below this, one thread

// y[i] = f(x[i]) over [0, n), in parallel chunks.
template <typename T, typename F>
void map1(const T* x, T* y, int64_t n, F f) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
}

// out[i] = f(a[i], b[i]), in parallel chunks.
template <typename T, typename F>
void map2(const T* a, const T* b, T* out, int64_t n, F f) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = f(a[i], b[i]);
  });
}

// g[i] = f(grad[i], v[i]) with v = x or y.
template <typename T, typename F>
void map_backward(const T* grad, const T* v, T* g, int64_t n, F f) {
  map2(grad, v, g, n, f);
}

// Calls body(f) with the elementwise function of `op` (the twins' formulas).
template <typename T, typename Body>
void with_binary(BinaryOp op, Body body) {
  switch (op) {
    case BinaryOp::Add:
      return body([](T a, T b) { return a + b; });
    case BinaryOp::Sub:
      return body([](T a, T b) { return a - b; });
    case BinaryOp::Mul:
      return body([](T a, T b) { return a * b; });
    case BinaryOp::Div:
      return body([](T a, T b) { return a / b; });
    case BinaryOp::Max:
      return body([](T a, T b) { return std::isnan(a) || a > b ? a : b; });
    case BinaryOp::Min:
      return body([](T a, T b) { return std::isnan(a) || a < b ? a : b; });
    case BinaryOp::Pow:
      return body([](T a, T b) { return std::pow(a, b); });
  }
  ECH_FAIL("binary: unknown op ", static_cast<int>(op));
}

}  // namespace

template <typename T>
void unary(UnaryOp op, const T* x, T* y, int64_t n) {
  switch (op) {
    case UnaryOp::Neg:
      return map1(x, y, n, [](T v) { return -v; });
    case UnaryOp::Abs:
      return map1(x, y, n, [](T v) { return std::abs(v); });
    case UnaryOp::Exp:
      return map1(x, y, n, [](T v) { return std::exp(v); });
    case UnaryOp::Log:
      return map1(x, y, n, [](T v) { return std::log(v); });
    case UnaryOp::Sqrt:
      return map1(x, y, n, [](T v) { return std::sqrt(v); });
    case UnaryOp::Relu:
      return map1(x, y, n, [](T v) { return v > T(0) ? v : T(0); });
    case UnaryOp::Tanh:
      return map1(x, y, n, [](T v) { return std::tanh(v); });
    case UnaryOp::Sigmoid:
      return map1(x, y, n, [](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case UnaryOp::Square:
      return map1(x, y, n, [](T v) { return v * v; });
    case UnaryOp::Reciprocal:
      return map1(x, y, n, [](T v) { return T(1) / v; });
  }
  ECH_FAIL("unary: unknown op ", static_cast<int>(op));
}

template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n) {
  const T* g = grad_out;
  switch (op) {
    case UnaryOp::Neg:
      return map1(g, grad_in, n, [](T d) { return -d; });
    case UnaryOp::Abs:
      return map_backward(g, x, grad_in, n,
                          [](T d, T v) { return v > T(0) ? d : (v < T(0) ? -d : T(0)); });
    case UnaryOp::Exp:
      return map_backward(g, y, grad_in, n, [](T d, T v) { return d * v; });
    case UnaryOp::Log:
      return map_backward(g, x, grad_in, n, [](T d, T v) { return d / v; });
    case UnaryOp::Sqrt:
      return map_backward(g, x, grad_in, n, [](T d, T v) { return d / (T(2) * std::sqrt(v)); });
    case UnaryOp::Relu:
      return map_backward(g, x, grad_in, n, [](T d, T v) { return v > T(0) ? d : T(0); });
    case UnaryOp::Tanh:
      return map_backward(g, y, grad_in, n, [](T d, T v) { return d * (T(1) - v * v); });
    case UnaryOp::Sigmoid:
      return map_backward(g, y, grad_in, n, [](T d, T v) { return d * v * (T(1) - v); });
    case UnaryOp::Square:
      return map_backward(g, x, grad_in, n, [](T d, T v) { return d * T(2) * v; });
    case UnaryOp::Reciprocal:
      return map_backward(g, x, grad_in, n, [](T d, T v) { return -d / (v * v); });
  }
  ECH_FAIL("unary_backward: unknown op ", static_cast<int>(op));
}

template <typename T>
void binary_rows(BinaryOp op, const T* a, const T* b, int64_t rows, int64_t cols, int64_t b_rows,
                 bool b_first, T* out) {
  with_binary<T>(op, [&](auto f) {
    if (b_rows == rows) {
      if (b_first)
        map2(b, a, out, rows * cols, f);
      else
        map2(a, b, out, rows * cols, f);
      return;
    }
    const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1));
    parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* ar = a + r * cols;
        const T* left = b_first ? b : ar;  // both read at column c
        const T* right = b_first ? ar : b;
        T* outr = out + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) outr[c] = f(left[c], right[c]);
      }
    });
  });
}

template <typename T>
void binary_scalar(BinaryOp op, const T* a, T s, bool scalar_first, T* out, int64_t n) {
  with_binary<T>(op, [&](auto f) {
    if (scalar_first)
      map1(a, out, n, [&](T v) { return f(s, v); });
    else
      map1(a, out, n, [&](T v) { return f(v, s); });
  });
}

template <typename T>
void sum_rows(const T* x, int64_t rows, int64_t cols, bool mean, T* out) {
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(rows, 1));  // columns
  parallel_for(cols, grain, [&](int64_t c0, int64_t c1) {
    const int64_t width = c1 - c0;
    double* sums = scratch<double>(0, static_cast<size_t>(width));
    std::fill(sums, sums + width, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) sums[c] += static_cast<double>(row[c]);
    }
    for (int64_t c = 0; c < width; ++c)
      out[c0 + c] = static_cast<T>(mean ? sums[c] / static_cast<double>(rows) : sums[c]);
  });
}

template <typename T>
void sum_inner(const T* x, int64_t rows, int64_t cols, bool mean, T* out) {
  const double divisor = mean ? static_cast<double>(cols) : 1.0;
  const auto finish = [&](int64_t r, double sum) {
    out[r] = static_cast<T>(mean ? sum / divisor : sum);
  };
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(cols, 1));  // rows
  parallel_for(rows, grain, [&](int64_t r0, int64_t r1) {
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {  // four independent chains; each row still adds in order
      const T* p = x + r * cols;
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      for (int64_t c = 0; c < cols; ++c) {
        s0 += static_cast<double>(p[c]);
        s1 += static_cast<double>(p[cols + c]);
        s2 += static_cast<double>(p[2 * cols + c]);
        s3 += static_cast<double>(p[3 * cols + c]);
      }
      finish(r, s0);
      finish(r + 1, s1);
      finish(r + 2, s2);
      finish(r + 3, s3);
    }
    for (; r < r1; ++r) {
      double sum = 0.0;
      for (int64_t c = 0; c < cols; ++c) sum += static_cast<double>(x[r * cols + c]);
      finish(r, sum);
    }
  });
}

template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dst[i] += alpha * src[i];
  });
}

template <typename T>
void copy(const T* src, T* dst, int64_t n) {
  parallel_for(n, kGrain * 4, [&](int64_t begin, int64_t end) {
    std::memcpy(dst + begin, src + begin, sizeof(T) * static_cast<size_t>(end - begin));
  });
}

namespace {
// out[i * To] = in[i * From] for i < n: constant strides, which the compiler vectorises.
template <int From, int To, typename T>
void copy_row(const T* in, T* out, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i * To] = in[i * From];
}
}  // namespace

template <typename T>
void copy_strided(const T* src, const int64_t* src_strides, T* dst, const int64_t* dst_strides,
                  const int64_t* shape, int rank) {
  // Dims of size 1 dropped, neighbours that are contiguous with each other in both tensors
  // merged, so the innermost dim is as long as it can be.
  int64_t size[kMaxStridedDims], from[kMaxStridedDims], to[kMaxStridedDims];
  int dims = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    if (dims > 0 && from[dims - 1] == src_strides[d] * shape[d] &&
        to[dims - 1] == dst_strides[d] * shape[d]) {
      size[dims - 1] *= shape[d];
      from[dims - 1] = src_strides[d];
      to[dims - 1] = dst_strides[d];
      continue;
    }
    ECH_CHECK(dims < kMaxStridedDims, "copy_strided: rank ", rank, " is above ", kMaxStridedDims);
    size[dims] = shape[d];
    from[dims] = src_strides[d];
    to[dims] = dst_strides[d];
    ++dims;
  }
  if (dims == 0) {
    *dst = *src;
    return;
  }
  const int64_t inner = size[dims - 1], from_inner = from[dims - 1], to_inner = to[dims - 1];
  int64_t rows = 1;
  for (int d = 0; d + 1 < dims; ++d) rows *= size[d];
  parallel_for(rows, std::max<int64_t>(1, kGrain / inner), [&](int64_t begin, int64_t end) {
    // The outer dims' indices of row `begin`, then counted up row by row: a division per dim
    // per row cost more than the option-A shortcut's rows of 16 or 8 elements themselves.
    int64_t index[kMaxStridedDims] = {}, src_at = 0, dst_at = 0;
    for (int64_t d = dims - 2, rest = begin; d >= 0; --d) {
      index[d] = rest % size[d];
      src_at += index[d] * from[d];
      dst_at += index[d] * to[d];
      rest /= size[d];
    }
    for (int64_t r = begin; r < end; ++r) {
      const T* in = src + src_at;
      T* out = dst + dst_at;
      if (from_inner == 1 && to_inner == 1) {
        std::copy(in, in + inner, out);
      } else if (from_inner == 2 && to_inner == 1) {  // the shortcut's every second pixel
        copy_row<2, 1>(in, out, inner);
      } else if (from_inner == 1 && to_inner == 2) {  // ... and its gradient's
        copy_row<1, 2>(in, out, inner);
      } else {
        for (int64_t i = 0; i < inner; ++i) out[i * to_inner] = in[i * from_inner];
      }
      for (int d = dims - 2; d >= 0; --d) {  // the next row
        src_at += from[d];
        dst_at += to[d];
        if (++index[d] < size[d]) break;
        src_at -= size[d] * from[d];
        dst_at -= size[d] * to[d];
        index[d] = 0;
      }
    }
  });
}

template <typename T>
void fill(T* dst, T value, int64_t n) {
  parallel_for(n, kGrain * 4,
               [&](int64_t begin, int64_t end) { std::fill(dst + begin, dst + end, value); });
}

template void fill<float>(float*, float, int64_t);
template void fill<double>(double*, double, int64_t);
template void fill<int32_t>(int32_t*, int32_t, int64_t);
template void fill<int64_t>(int64_t*, int64_t, int64_t);
template void fill<uint8_t>(uint8_t*, uint8_t, int64_t);
template void copy<float>(const float*, float*, int64_t);
template void copy<double>(const double*, double*, int64_t);
template void copy<int32_t>(const int32_t*, int32_t*, int64_t);
template void copy<int64_t>(const int64_t*, int64_t*, int64_t);
template void copy<uint8_t>(const uint8_t*, uint8_t*, int64_t);
// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_COPY_STRIDED(T) \
  template void copy_strided<T>(const T*, const int64_t*, T*, const int64_t*, const int64_t*, int);
ECH_INSTANTIATE_COPY_STRIDED(float)
ECH_INSTANTIATE_COPY_STRIDED(double)
ECH_INSTANTIATE_COPY_STRIDED(int32_t)
ECH_INSTANTIATE_COPY_STRIDED(int64_t)
ECH_INSTANTIATE_COPY_STRIDED(uint8_t)
#undef ECH_INSTANTIATE_COPY_STRIDED
// NOLINTEND(bugprone-macro-parentheses)

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_INSTANTIATE_FAST_ELEMENTWISE(T)                                                        \
  template void unary<T>(UnaryOp, const T*, T*, int64_t);                                          \
  template void unary_backward<T>(UnaryOp, const T*, const T*, const T*, T*, int64_t);             \
  template void binary_rows<T>(BinaryOp, const T*, const T*, int64_t, int64_t, int64_t, bool, T*); \
  template void binary_scalar<T>(BinaryOp, const T*, T, bool, T*, int64_t);                        \
  template void axpy<T>(T*, const T*, T, int64_t);                                                 \
  template void sum_rows<T>(const T*, int64_t, int64_t, bool, T*);                                 \
  template void sum_inner<T>(const T*, int64_t, int64_t, bool, T*);
ECH_INSTANTIATE_FAST_ELEMENTWISE(float)
ECH_INSTANTIATE_FAST_ELEMENTWISE(double)
#undef ECH_INSTANTIATE_FAST_ELEMENTWISE
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu::fast
