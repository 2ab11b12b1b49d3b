// Naive CPU twins of cuda/kernels/elementwise.cu: same names, same arguments (minus the stream).
// Outputs are contiguous buffers of n elements; inputs are read through a StridedIndexer whose
// sizes are the OUTPUT shape (strides 0 on broadcast dims), so views and broadcasts need no copy.
// Unless noted, T is float or double. unary, unary_backward and binary also take bfloat16: each
// element widened to float, computed in float and rounded to nearest even as it is stored
// (kernels/cast.h compute_type; the CUDA kernels do the same).
#pragma once

#include <cstdint>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/indexer.h>

namespace echelon::cpu {

// y[i] = op(x[x_ix(i)]). y (n) contiguous.
template <typename T>
void unary(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n);

// grad_in[i] = grad_out[i] * op'(x[i]) — using x or y = op(x) as tensor/ops.h documents.
// All four buffers contiguous with n elements.
template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n);

// out[i] = a[a_ix(i)] op b[b_ix(i)]; both indexers have the output's sizes. out (n) contiguous.
template <typename T>
void binary(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, T* out,
            int64_t n);

// out[i] = a[a_ix(i)] op s, or s op a[a_ix(i)] when scalar_first.
template <typename T>
void binary_scalar(BinaryOp op, const T* a, StridedIndexer a_ix, T s, bool scalar_first, T* out,
                   int64_t n);

// out[i] = a[a_ix(i)] == b[b_ix(i)] ? 1.0f : 0.0f. T: float, double, int32_t, int64_t, uint8_t.
template <typename T>
void eq(const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, float* out, int64_t n);

// out[out_ix(i)] = value for i < n (out may be a strided view). T: all five dtypes.
template <typename T>
void fill(T* out, StridedIndexer out_ix, T value, int64_t n);

// out[i] = i. T: float, double, int32_t, int64_t.
template <typename T>
void arange(T* out, int64_t n);

// dst[dst_ix(i)] = static_cast<Dst>(src[src_ix(i)]): copy, cast, contiguous(), broadcast copy_.
// Both indexers have the destination's sizes. Src, Dst: any of the five dtypes.
template <typename Src, typename Dst>
void copy_cast(const Src* src, StridedIndexer src_ix, Dst* dst, StridedIndexer dst_ix, int64_t n);

// dst[i] += alpha * src[i]. Both contiguous (n).
template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n);

// A linear layer's bias, in place: y (rows, features) += bias (features) broadcast over the rows,
// then, with relu, y = y > 0 ? y : 0 (the ReLU twin's). Contiguous.
template <typename T>
void add_row_bias(T* y, const T* bias, int64_t rows, int64_t features, bool relu);

// y[i] = min(max(x[i], lo), hi). Contiguous (n).
template <typename T>
void clamp(const T* x, T* y, T lo, T hi, int64_t n);

// *count = number of NaN/Inf among x[0..n). count points at one int64 in the same memory as x.
template <typename T>
void count_nonfinite(const T* x, int64_t n, int64_t* count);

}  // namespace echelon::cpu
