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
