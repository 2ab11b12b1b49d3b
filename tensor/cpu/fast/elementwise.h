// Fast CPU elementwise loops over contiguous buffers: the op is chosen once per call (not per
// element, as in the naive twins' strided loops), so each loop is a plain vectorisable one, and
// long loops are split across the thread pool. The per-element formulas are the twins', so the
// results are bit-identical to tensor/cpu/elementwise.h.
#pragma once

#include <cstdint>

#include <echelon/base/op_kinds.h>

namespace echelon::cpu::fast {

// y (n) = op(x (n)).
template <typename T>
void unary(UnaryOp op, const T* x, T* y, int64_t n);
// grad_in (n) = grad_out * op'(x or y), as cpu::unary_backward.
template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n);
// out (rows, cols) = a (rows, cols) op b, where b is (rows, cols) when b_rows == rows, or one row
// (cols) repeated for every row when b_rows == 1 (a bias). b_first swaps the operands: b op a.
template <typename T>
void binary_rows(BinaryOp op, const T* a, const T* b, int64_t rows, int64_t cols, int64_t b_rows,
                 bool b_first, T* out);
// out (n) = a (n) op s, or s op a when scalar_first.
template <typename T>
void binary_scalar(BinaryOp op, const T* a, T s, bool scalar_first, T* out, int64_t n);
// dst (n) = src (n); any dtype of the twins (float, double, int32, int64, uint8).
template <typename T>
void copy(const T* src, T* dst, int64_t n);
inline constexpr int kMaxStridedDims = 8;
// dst = src over `shape` (rank <= 8 dims), each read and written through its own element strides
// (views: slices, steps, transposes; no dst stride 0 on a dim longer than 1, no overlap): the twin
// copy_cast's result without its per-element index arithmetic. The same dtypes as copy.
template <typename T>
void copy_strided(const T* src, const int64_t* src_strides, T* dst, const int64_t* dst_strides,
                  const int64_t* shape, int rank);
// dst (n) = value; the same dtypes as copy.
template <typename T>
void fill(T* dst, T value, int64_t n);
// out (cols) = the sum over rows of x (rows, cols), or with `mean` that sum / rows: cpu::reduce
// over x's leading dims. Each column is added up in double in row order, as the twin, so the
// results are bit-identical; the columns are split across the thread pool.
template <typename T>
void sum_rows(const T* x, int64_t rows, int64_t cols, bool mean, T* out);
// out (rows) = the sum of each row of x (rows, cols), or with `mean` that sum / cols: cpu::reduce
// over x's trailing dims (global average pooling, a loss's mean). Each row is added up in double
// in column order, as the twin, so the results are bit-identical; four rows' chains run side by
// side and the rows are split across the thread pool.
template <typename T>
void sum_inner(const T* x, int64_t rows, int64_t cols, bool mean, T* out);
// dst (n) += alpha * src (n).
template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n);

}  // namespace echelon::cpu::fast
