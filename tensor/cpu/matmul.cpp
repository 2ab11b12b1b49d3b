// Naive CPU twin of cuda/kernels/matmul.cu (triple loop, double accumulation) and the OpenBLAS
// path. The twin is the oracle; the BLAS path is what CPU training uses.
#include <echelon/tensor/cpu/matmul.h>

#include <algorithm>
#include <type_traits>

#include <echelon/base/error.h>
#include <echelon/kernels/bf16.h>
#include <echelon/kernels/tf32.h>

#if ECHELON_WITH_BLAS
#include <cblas.h>
#endif

namespace echelon::cpu {

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      T& c = C[i * ldc + j];
      // beta == 0 must not read C: it may be uninitialised or NaN.
      c = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : static_cast<double>(beta) * c));
    }
  }
}

namespace {

// gemm over round(a) * round(b): the twins of the tensor-core kernels.
template <float (*Round)(float)>
void gemm_rounded(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                  int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = Round(trans_a ? A[k * lda + i] : A[i * lda + k]);
        const double b = Round(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
        acc += a * b;
      }
      float& c = C[i * ldc + j];
      c = static_cast<float>(alpha * acc + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * c));
    }
  }
}

}  // namespace

void gemm_tf32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_rounded<round_to_tf32>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) {
  gemm_rounded<round_to_bf16>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                          const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                          int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c,
                          int64_t batch) {
  for (int64_t b = 0; b < batch; ++b)
    gemm(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
         C + b * stride_c, ldc);
}

bool blas_available() {
#if ECHELON_WITH_BLAS
  return true;
#else
  return false;
#endif
}

template <typename T>
void gemm_blas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
               int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
#if ECHELON_WITH_BLAS
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // Nothing to multiply: C = beta * C, without reading C when beta == 0.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  const auto m = static_cast<blasint>(M), n = static_cast<blasint>(N), k = static_cast<blasint>(K);
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, A, static_cast<blasint>(lda), B,
                static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
  }
#else
  ECH_FAIL("gemm_blas: Echelon was built without OpenBLAS (use MatmulImpl::Naive)");
#endif
}

template <typename T>
void gemm_strided_batched_blas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
                               const T* A, int64_t lda, int64_t stride_a, const T* B, int64_t ldb,
                               int64_t stride_b, T beta, T* C, int64_t ldc, int64_t stride_c,
                               int64_t batch) {
  for (int64_t b = 0; b < batch; ++b)
    gemm_blas(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
              C + b * stride_c, ldc);
}

// T names a type below, and a type cannot be parenthesised.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define ECH_GEMM_TWINS(T)                                                                         \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,    \
                        int64_t, T, T*, int64_t);                                                 \
  template void gemm_strided_batched<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*,       \
                                        int64_t, int64_t, const T*, int64_t, int64_t, T, T*,      \
                                        int64_t, int64_t, int64_t);                               \
  template void gemm_blas<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,         \
                             const T*, int64_t, T, T*, int64_t);                                  \
  template void gemm_strided_batched_blas<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*,  \
                                             int64_t, int64_t, const T*, int64_t, int64_t, T, T*, \
                                             int64_t, int64_t, int64_t);
ECH_GEMM_TWINS(float)
ECH_GEMM_TWINS(double)
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace echelon::cpu
