// Naive CPU twins of cuda/kernels/elementwise.cu: plain loops, one element at a time.
#include <echelon/tensor/cpu/elementwise.h>

#include <algorithm>
#include <cmath>

#include <echelon/base/error.h>
#include <echelon/kernels/cast.h>

namespace echelon::cpu {
namespace {

template <typename T>
T apply_unary(UnaryOp op, T x) {
  switch (op) {
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return std::abs(x);
    case UnaryOp::Exp:
      return std::exp(x);
    case UnaryOp::Log:
      return std::log(x);
    case UnaryOp::Sqrt:
      return std::sqrt(x);
    case UnaryOp::Relu:
      return x > T(0) ? x : T(0);
    case UnaryOp::Tanh:
      return std::tanh(x);
    case UnaryOp::Sigmoid:
      return T(1) / (T(1) + std::exp(-x));
    case UnaryOp::Square:
      return x * x;
    case UnaryOp::Reciprocal:
      return T(1) / x;
  }
  ECH_FAIL("unary: unknown op ", static_cast<int>(op));
}

template <typename T>
T apply_unary_backward(UnaryOp op, T g, T x, T y) {
  switch (op) {
    case UnaryOp::Neg:
      return -g;
    case UnaryOp::Abs:
      return x > T(0) ? g : (x < T(0) ? -g : T(0));
    case UnaryOp::Exp:
      return g * y;
    case UnaryOp::Log:
      return g / x;
    case UnaryOp::Sqrt:
      return g / (T(2) * std::sqrt(x));
    case UnaryOp::Relu:
      return x > T(0) ? g : T(0);
    case UnaryOp::Tanh:
      return g * (T(1) - y * y);
    case UnaryOp::Sigmoid:
      return g * y * (T(1) - y);
    case UnaryOp::Square:
      return g * T(2) * x;
    case UnaryOp::Reciprocal:
      return -g / (x * x);
  }
  ECH_FAIL("unary_backward: unknown op ", static_cast<int>(op));
}

template <typename T>
T apply_binary(BinaryOp op, T a, T b) {
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
      return std::isnan(a) || a > b ? a : b;  // NaN propagates
    case BinaryOp::Min:
      return std::isnan(a) || a < b ? a : b;
    case BinaryOp::Pow:
      return std::pow(a, b);
  }
  ECH_FAIL("binary: unknown op ", static_cast<int>(op));
}

template <typename T>
bool is_finite_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
  return true;
}

}  // namespace

// unary, unary_backward and binary compute in compute_type<T> (kernels/cast.h): bfloat16
// elements are widened to float, the result rounded to bfloat16 as it is stored.
template <typename T>
void unary(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n) {
  using C = compute_type<T>;
  for (int64_t i = 0; i < n; ++i)
    y[i] = cast_value<T>(apply_unary(op, cast_value<C>(x[strided_offset(x_ix, i)])));
}

template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n) {
  using C = compute_type<T>;
  for (int64_t i = 0; i < n; ++i)
    grad_in[i] = cast_value<T>(apply_unary_backward(op, cast_value<C>(grad_out[i]),
                                                    cast_value<C>(x[i]), cast_value<C>(y[i])));
}

template <typename T>
void binary(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, T* out,
            int64_t n) {
  using C = compute_type<T>;
  for (int64_t i = 0; i < n; ++i)
    out[i] = cast_value<T>(apply_binary(op, cast_value<C>(a[strided_offset(a_ix, i)]),
                                        cast_value<C>(b[strided_offset(b_ix, i)])));
}

template <typename T>
void binary_scalar(BinaryOp op, const T* a, StridedIndexer a_ix, T s, bool scalar_first, T* out,
                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T v = a[strided_offset(a_ix, i)];
    out[i] = scalar_first ? apply_binary(op, s, v) : apply_binary(op, v, s);
  }
}

template <typename T>
void eq(const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[strided_offset(a_ix, i)] == b[strided_offset(b_ix, i)] ? 1.0f : 0.0f;
}

template <typename T>
void fill(T* out, StridedIndexer out_ix, T value, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[strided_offset(out_ix, i)] = value;
}

template <typename T>
void arange(T* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(i);
}

template <typename Src, typename Dst>
void copy_cast(const Src* src, StridedIndexer src_ix, Dst* dst, StridedIndexer dst_ix, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    dst[strided_offset(dst_ix, i)] = cast_value<Dst>(src[strided_offset(src_ix, i)]);
}

template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += alpha * src[i];
}

template <typename T>
void add_row_bias(T* y, const T* bias, int64_t rows, int64_t features, bool relu) {
  for (int64_t r = 0; r < rows; ++r) {
    T* row = y + r * features;
    for (int64_t j = 0; j < features; ++j) {
      const T v = row[j] + bias[j];
      row[j] = !relu || v > T(0) ? v : T(0);
    }
  }
}

template <typename T>
void clamp(const T* x, T* y, T lo, T hi, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

template <typename T>
void count_nonfinite(const T* x, int64_t n, int64_t* count) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += is_finite_value(x[i]) ? 0 : 1;
  *count = bad;
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_FLOAT_TWINS(T)                                                                  \
  template void unary<T>(UnaryOp, const T*, StridedIndexer, T*, int64_t);                   \
  template void unary_backward<T>(UnaryOp, const T*, const T*, const T*, T*, int64_t);      \
  template void binary<T>(BinaryOp, const T*, StridedIndexer, const T*, StridedIndexer, T*, \
                          int64_t);                                                         \
  template void binary_scalar<T>(BinaryOp, const T*, StridedIndexer, T, bool, T*, int64_t); \
  template void axpy<T>(T*, const T*, T, int64_t);                                          \
  template void add_row_bias<T>(T*, const T*, int64_t, int64_t, bool);                      \
  template void clamp<T>(const T*, T*, T, T, int64_t);                                      \
  template void count_nonfinite<T>(const T*, int64_t, int64_t*);
ECH_FLOAT_TWINS(float)
ECH_FLOAT_TWINS(double)

#define ECH_ALL_TYPE_TWINS(T)                                                               \
  template void eq<T>(const T*, StridedIndexer, const T*, StridedIndexer, float*, int64_t); \
  template void fill<T>(T*, StridedIndexer, T, int64_t);                                    \
  ECH_COPY_FROM(T, float)                                                                   \
  ECH_COPY_FROM(T, double)                                                                  \
  ECH_COPY_FROM(T, int32_t)                                                                 \
  ECH_COPY_FROM(T, int64_t)                                                                 \
  ECH_COPY_FROM(T, uint8_t)                                                                 \
  ECH_COPY_FROM(T, bfloat16)
#define ECH_COPY_FROM(Src, Dst) \
  template void copy_cast<Src, Dst>(const Src*, StridedIndexer, Dst*, StridedIndexer, int64_t);
ECH_ALL_TYPE_TWINS(float)
ECH_ALL_TYPE_TWINS(double)
ECH_ALL_TYPE_TWINS(int32_t)
ECH_ALL_TYPE_TWINS(int64_t)
ECH_ALL_TYPE_TWINS(uint8_t)
// bfloat16: cast and copied, and the maps the dispatch lets compute on it (ops::bf16_computes:
// ReLU forward and backward, add), in float.
template void unary<bfloat16>(UnaryOp, const bfloat16*, StridedIndexer, bfloat16*, int64_t);
template void unary_backward<bfloat16>(UnaryOp, const bfloat16*, const bfloat16*, const bfloat16*,
                                       bfloat16*, int64_t);
template void binary<bfloat16>(BinaryOp, const bfloat16*, StridedIndexer, const bfloat16*,
                               StridedIndexer, bfloat16*, int64_t);
ECH_COPY_FROM(bfloat16, float)
ECH_COPY_FROM(bfloat16, double)
ECH_COPY_FROM(bfloat16, int32_t)
ECH_COPY_FROM(bfloat16, int64_t)
ECH_COPY_FROM(bfloat16, uint8_t)
ECH_COPY_FROM(bfloat16, bfloat16)
// NOLINTEND(bugprone-macro-parentheses)

template void arange<float>(float*, int64_t);
template void arange<double>(double*, int64_t);
template void arange<int32_t>(int32_t*, int64_t);
template void arange<int64_t>(int64_t*, int64_t);

}  // namespace echelon::cpu
