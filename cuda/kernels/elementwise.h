// Launchers of cuda/kernels/elementwise.cu. Same names and arguments as the CPU twins in
// tensor/cpu/elementwise.h (read the shape contracts there), plus the stream to launch on.
// Instantiated for float unless noted; pointers are device pointers. unary, unary_backward and
// binary also for bfloat16 (computed in float, rounded to nearest even when stored).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/base/op_kinds.h>
#include <echelon/kernels/bf16.h>
#include <echelon/kernels/indexer.h>

namespace echelon::cuda {

template <typename T>
void unary(UnaryOp op, const T* x, StridedIndexer x_ix, T* y, int64_t n, cudaStream_t stream);

template <typename T>
void unary_backward(UnaryOp op, const T* grad_out, const T* x, const T* y, T* grad_in, int64_t n,
                    cudaStream_t stream);

template <typename T>
void binary(BinaryOp op, const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, T* out,
            int64_t n, cudaStream_t stream);

template <typename T>
void binary_scalar(BinaryOp op, const T* a, StridedIndexer a_ix, T s, bool scalar_first, T* out,
                   int64_t n, cudaStream_t stream);

// T: float, int32_t, int64_t, uint8_t.
template <typename T>
void eq(const T* a, StridedIndexer a_ix, const T* b, StridedIndexer b_ix, float* out, int64_t n,
        cudaStream_t stream);

// T: float, int32_t, int64_t, uint8_t.
template <typename T>
void fill(T* out, StridedIndexer out_ix, T value, int64_t n, cudaStream_t stream);

// T: float, int32_t, int64_t.
template <typename T>
void arange(T* out, int64_t n, cudaStream_t stream);

// Src, Dst: each of float, int32_t, int64_t, uint8_t (16 pairs).
template <typename Src, typename Dst>
void copy_cast(const Src* src, StridedIndexer src_ix, Dst* dst, StridedIndexer dst_ix, int64_t n,
               cudaStream_t stream);

template <typename T>
void axpy(T* dst, const T* src, T alpha, int64_t n, cudaStream_t stream);

void add_row_bias(float* y, const float* bias, int64_t rows, int64_t features, bool relu,
                  cudaStream_t stream);

template <typename T>
void clamp(const T* x, T* y, T lo, T hi, int64_t n, cudaStream_t stream);

// count: one device int64; the launcher zeroes it (cudaMemsetAsync) before counting.
template <typename T>
void count_nonfinite(const T* x, int64_t n, int64_t* count, cudaStream_t stream);

}  // namespace echelon::cuda
