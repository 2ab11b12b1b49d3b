// OpenBLAS GEMM split across the fast path's thread pool: rows of C (or its columns when it has
// fewer rows than threads) go to the pool's tasks, each a single-threaded BLAS call. Small
// products run as one call. Row-major, same arguments as cpu::gemm_blas.
#pragma once

#include <cstdint>

namespace echelon::cpu::fast {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` products at the given element strides (0: the operand is shared by every product).
template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                          const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                          int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c,
                          int64_t batch);

}  // namespace echelon::cpu::fast
