// Naive CPU twin of cuda/kernels/matmul.cu, plus the OpenBLAS path (not a twin: the fast CPU
// route, tested against the twin). T is float or double.
//
// Row-major GEMM: C (M, N) = alpha * op(A) op(B) + beta * C, where op(A) is (M, K) and op(B) is
// (K, N). A is stored (M, K) with row stride lda, or (K, M) when trans_a; B is stored (K, N)
// with row stride ldb, or (N, K) when trans_b; C has row stride ldc. When beta == 0, C is not
// read (it may hold NaN).
#pragma once

#include <cstdint>

namespace echelon::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// The twin of the TF32 tensor-core kernel (cuda::gemm* under Precision::Tf32): each input of a
// product rounded to TF32 (kernels/tf32.h), then as gemm. float only.
void gemm_tf32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);
// The twin of the bf16 tensor-core kernel (Precision::Bf16): each input of a product rounded to
// bfloat16, to nearest even (kernels/bf16.h), then as gemm. float only.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc);

// `batch` independent GEMMs; matrix b of A starts at A + b * stride_a (likewise B, C).
template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                          const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                          int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c,
                          int64_t batch);

// True when the library was built with OpenBLAS.
bool blas_available();
// Same contract through cblas_sgemm/cblas_dgemm; throws when !blas_available().
template <typename T>
void gemm_blas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);
template <typename T>
void gemm_strided_batched_blas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                               const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                               int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c,
                               int64_t batch);

}  // namespace echelon::cpu
