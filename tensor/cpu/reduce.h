// Naive CPU twins of cuda/kernels/reduce.cu (double accumulation). T is float or double.
//
// Reductions see their input as a 2-D (outer, inner) problem: the dispatch layer permutes the
// reduced dims to the end (a view, no copy) and builds x_ix over that permuted shape, so element
// (o, r) sits at x[x_ix(o * inner + r)]. out (outer) is contiguous.
#pragma once

#include <cstdint>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/indexer.h>

namespace echelon::cpu {

// out[o] = op over r of x(o, r). Mean divides by inner. inner >= 1.
template <typename T>
void reduce(ReduceOp op, const T* x, StridedIndexer x_ix, T* out, int64_t outer, int64_t inner);

// out[o] = the first r where x(o, r) is largest (NaN counts as largest). out int64 (outer).
template <typename T>
void argmax(const T* x, StridedIndexer x_ix, int64_t* out, int64_t outer, int64_t inner);

// A training step's device-side statistics (ops::step_statistics): *correct = the number of rows
// of logits (n, classes), contiguous, whose argmax (as above) equals targets[row]; *guard +=
// 0 * *loss (NaN from the first non-finite loss on).
template <typename T>
void step_statistics(const T* logits, const int64_t* targets, int64_t n, int64_t classes,
                     const T* loss, T* guard, T* correct);

// Softmax family: contiguous x, y, grads viewed as (outer, dim_size, inner), normalised over the
// middle axis. Numerically stable (subtracts the max).
template <typename T>
void softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner);
template <typename T>
void log_softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner);
// grad_in = y * (grad_out - sum_dim(grad_out * y)), with y = softmax(x).
template <typename T>
void softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer, int64_t dim_size,
                      int64_t inner);
// grad_in = grad_out - exp(y) * sum_dim(grad_out), with y = log_softmax(x).
template <typename T>
void log_softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer,
                          int64_t dim_size, int64_t inner);

}  // namespace echelon::cpu
