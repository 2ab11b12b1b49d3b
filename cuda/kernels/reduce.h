// Launchers of cuda/kernels/reduce.cu: same names and arguments as tensor/cpu/reduce.h (read the
// (outer, inner) and (outer, dim_size, inner) conventions there), plus the stream. float only.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/indexer.h>

namespace echelon::cuda {

template <typename T>
void reduce(ReduceOp op, const T* x, StridedIndexer x_ix, T* out, int64_t outer, int64_t inner,
            cudaStream_t stream);

template <typename T>
void argmax(const T* x, StridedIndexer x_ix, int64_t* out, int64_t outer, int64_t inner,
            cudaStream_t stream);

// A linear layer's ReLU backward and bias gradient in one pass: masked (rows, columns) =
// grad_out * (relu_out > 0), column_sums (columns) = masked summed over the rows, each bit for bit
// what unary_backward(Relu) and reduce(Sum) over dim 0 give (the column kernel, same order). All
// contiguous. Its CPU twin is that composition (ops::relu_backward_column_sums).
void relu_backward_column_sums(const float* grad_out, const float* relu_out, float* masked,
                               float* column_sums, int64_t rows, int64_t columns,
                               cudaStream_t stream);

// One block (a step's batch of rows): see tensor/cpu/reduce.h.
void step_statistics(const float* logits, const int64_t* targets, int64_t n, int64_t classes,
                     const float* loss, float* guard, float* correct, cudaStream_t stream);

template <typename T>
void softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner, cudaStream_t stream);
template <typename T>
void log_softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner,
                 cudaStream_t stream);
template <typename T>
void softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer, int64_t dim_size,
                      int64_t inner, cudaStream_t stream);
template <typename T>
void log_softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer,
                          int64_t dim_size, int64_t inner, cudaStream_t stream);

}  // namespace echelon::cuda
