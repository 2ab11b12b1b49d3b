#include <echelon/tensor/cpu/fast/gemm.h>

#include <algorithm>

#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/matmul.h>

namespace echelon::cpu::fast {
namespace {
// Below this many multiply-adds a split costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 18;
}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int64_t threads = num_threads();
  if (threads <= 1 || M * N * K < kMinParallelWork) {
    gemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // One chunk per thread (grain n / threads): every chunk is a BLAS call that packs the operand
  // it shares with the others again, so finer chunks would repeat that packing.
  if (M >= threads * 4) {
    // Rows [m0, m1) of C need rows [m0, m1) of op(A): row m0 of A, or column m0 when transposed.
    parallel_for(M, (M + threads - 1) / threads, [&](int64_t m0, int64_t m1) {
      const T* a = trans_a ? A + m0 : A + m0 * lda;
      gemm_blas(trans_a, trans_b, m1 - m0, N, K, alpha, a, lda, B, ldb, beta, C + m0 * ldc, ldc);
    });
  } else {
    // Columns [n0, n1) of C need columns [n0, n1) of op(B).
    parallel_for(
        N, std::max<int64_t>(16, (N + threads - 1) / threads), [&](int64_t n0, int64_t n1) {
          const T* b = trans_b ? B + n0 * ldb : B + n0;
          gemm_blas(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda, b, ldb, beta, C + n0, ldc);
        });
  }
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

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                          const float*, int64_t, float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm_strided_batched<float>(bool, bool, int64_t, int64_t, int64_t, float,
                                          const float*, int64_t, int64_t, const float*, int64_t,
                                          int64_t, float, float*, int64_t, int64_t, int64_t);
template void gemm_strided_batched<double>(bool, bool, int64_t, int64_t, int64_t, double,
                                           const double*, int64_t, int64_t, const double*, int64_t,
                                           int64_t, double, double*, int64_t, int64_t, int64_t);

}  // namespace echelon::cpu::fast
