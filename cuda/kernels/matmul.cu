// Row-major GEMM, two ways: our tiled SGEMM and cuBLAS.
//
// Our kernel: each 256-thread block computes a 128x128 tile of C, walking K in steps of 8. The
// block stages an (8 x 128) slice of op(A) and of op(B) in shared memory (k-major, so a thread
// reads its 8 rows / 8 columns as contiguous floats), and each thread keeps an 8x8 sub-tile of C
// in registers: 64 FMAs per 16 shared loads. Loads are bounds-checked (zero-filled), so any M,
// N, K and both transposes work, at the cost of no vectorised global loads. The global load
// mapping follows the storage order (k fastest for row-major A, m fastest for transposed A) so
// that neighbouring threads read neighbouring addresses. Shared rows are padded by 4 floats to
// spread the transposed stores over the banks.
// cuBLAS is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so we
// call it with the operands swapped and the same transpose flags (the "swap trick"); no copies.
#include <echelon/cuda/kernels/matmul.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include <echelon/cuda/blas.h>
#include <echelon/cuda/launch.h>

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

constexpr int kTileM = 128, kTileN = 128, kTileK = 8;
constexpr int kThreadM = 8, kThreadN = 8;
constexpr int kThreads = (kTileM / kThreadM) * (kTileN / kThreadN);  // 256
constexpr int kPad = 4;
constexpr int kLoadsPerThread = kTileM * kTileK / kThreads;  // 4 elements of A and of B
static_assert(kTileM == kTileN, "the load mapping below assumes square tiles");
static_assert(kTileM * kTileK % kThreads == 0);

__global__ void __launch_bounds__(kThreads)
    sgemm_tiled_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* __restrict__ A, int64_t lda, int64_t stride_a,
                       const float* __restrict__ B, int64_t ldb, int64_t stride_b, float beta,
                       float* __restrict__ C, int64_t ldc, int64_t stride_c, int64_t batch0) {
  const int64_t batch = batch0 + blockIdx.z;
  A += batch * stride_a;
  B += batch * stride_b;
  C += batch * stride_c;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kTileN;

  __shared__ __align__(16) float a_tile[kTileK][kTileM + kPad];  // a_tile[k][m] = op(A)(m0+m, k0+k)
  __shared__ __align__(16) float b_tile[kTileK][kTileN + kPad];  // b_tile[k][n] = op(B)(k0+k, n0+n)

  const int tid = threadIdx.x;
  const int thread_col = tid % (kTileN / kThreadN);
  const int thread_row = tid / (kTileN / kThreadN);
  float acc[kThreadM][kThreadN] = {};

  for (int64_t k0 = 0; k0 < K; k0 += kTileK) {
#pragma unroll
    for (int j = 0; j < kLoadsPerThread; ++j) {
      const int idx = tid + j * kThreads;
      // A: row-major (M, K) has k contiguous; transposed storage (K, M) has m contiguous.
      const int am = trans_a ? idx % kTileM : idx / kTileK;
      const int ak = trans_a ? idx / kTileM : idx % kTileK;
      const int64_t m = m0 + am, ka = k0 + ak;
      a_tile[ak][am] = (m < M && ka < K) ? (trans_a ? A[ka * lda + m] : A[m * lda + ka]) : 0.0f;
      // B: row-major (K, N) has n contiguous; transposed storage (N, K) has k contiguous.
      const int bn = trans_b ? idx / kTileK : idx % kTileN;
      const int bk = trans_b ? idx % kTileK : idx / kTileN;
      const int64_t n = n0 + bn, kb = k0 + bk;
      b_tile[bk][bn] = (n < N && kb < K) ? (trans_b ? B[n * ldb + kb] : B[kb * ldb + n]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTileK; ++k) {
      float a_frag[kThreadM], b_frag[kThreadN];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i) a_frag[i] = a_tile[k][thread_row * kThreadM + i];
#pragma unroll
      for (int j = 0; j < kThreadN; ++j) b_frag[j] = b_tile[k][thread_col * kThreadN + j];
#pragma unroll
      for (int i = 0; i < kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < kThreadN; ++j) acc[i][j] = fmaf(a_frag[i], b_frag[j], acc[i][j]);
    }
    __syncthreads();  // the next iteration overwrites the tiles
  }

#pragma unroll
  for (int i = 0; i < kThreadM; ++i) {
    const int64_t m = m0 + thread_row * kThreadM + i;
    if (m >= M) break;
#pragma unroll
    for (int j = 0; j < kThreadN; ++j) {
      const int64_t n = n0 + thread_col * kThreadN + j;
      if (n >= N) break;
      float* c = C + m * ldc + n;
      // beta == 0 must not read C: it may hold NaN (the contract in tensor/cpu/matmul.h).
      *c = beta == 0.0f ? alpha * acc[i][j] : fmaf(beta, *c, alpha * acc[i][j]);
    }
  }
}

constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;

void check_gemm_args(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc, int64_t batch) {
  ECH_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, op, ": negative size (M=", M, ", N=", N,
            ", K=", K, ", batch=", batch, ")");
  ECH_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, op,
            ": leading dimension too small (M=", M, ", N=", N, ", K=", K, ", lda=", lda,
            ", ldb=", ldb, ", ldc=", ldc, ", trans_a=", trans_a, ", trans_b=", trans_b, ")");
}

void launch_tiled(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                  int64_t stride_c, int64_t batch, cudaStream_t stream) {
  check_gemm_args(op, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch);
  if (M == 0 || N == 0 || batch == 0) return;
  const int64_t tiles_m = (M + kTileM - 1) / kTileM, tiles_n = (N + kTileN - 1) / kTileN;
  ECH_CHECK(tiles_m <= kMaxGridY && tiles_n <= INT_MAX, op, ": matrix too large for the tiled ",
            "kernel's grid (M=", M, ", N=", N, ")");
  // Batches beyond gridDim.z's limit go in several launches.
  for (int64_t batch0 = 0; batch0 < batch; batch0 += kMaxGridZ) {
    const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                    static_cast<unsigned>(std::min(kMaxGridZ, batch - batch0)));
    ECH_LAUNCH(grid, kThreads, 0, stream, sgemm_tiled_kernel)
    (trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
     batch0);
    ECH_CUDA_CHECK_LAUNCH(op);
  }
}

int to_int(int64_t value, const char* what, const char* op) {
  ECH_CHECK(value <= INT_MAX, op, ": ", what, " = ", value, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(value);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          cudaStream_t stream) {
  launch_tiled("gemm", trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
               stream);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, int64_t stride_a, const float* B,
                          int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch, cudaStream_t stream) {
  launch_tiled("gemm_strided_batched", trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
               stride_b, beta, C, ldc, stride_c, batch, stream);
}

void gemm_strided_batched_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                 float alpha, const float* A, int64_t lda, int64_t stride_a,
                                 const float* B, int64_t ldb, int64_t stride_b, float beta,
                                 float* C, int64_t ldc, int64_t stride_c, int64_t batch,
                                 cudaStream_t stream) {
  const char* op = "gemm_cublas";
  check_gemm_args(op, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch);
  if (M == 0 || N == 0 || batch == 0) return;
  // cuBLAS rejects leading dimensions below 1 even when K == 0 makes them irrelevant.
  const int m = to_int(M, "M", op), n = to_int(N, "N", op), k = to_int(K, "K", op);
  const int ld_a = to_int(std::max<int64_t>(lda, 1), "lda", op);
  const int ld_b = to_int(std::max<int64_t>(ldb, 1), "ldb", op);
  const int ld_c = to_int(ldc, "ldc", op);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  int device = 0;
  ECH_CUDA_CHECK(cudaGetDevice(&device));
  cublasHandle_t handle = cublas_handle(device);
  // cublas_handle binds the thread's current stream; the caller's stream wins.
  ECH_CUBLAS_CHECK(cublasSetStream(handle, stream));
  if (batch == 1) {
    ECH_CUBLAS_CHECK(
        cublasSgemm(handle, op_b, op_a, n, m, k, &alpha, B, ld_b, A, ld_a, &beta, C, ld_c));
    return;
  }
  const int batch_count = to_int(batch, "batch", op);
  ECH_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, op_b, op_a, n, m, k, &alpha, B, ld_b, stride_b,
                                             A, ld_a, stride_a, &beta, C, ld_c, stride_c,
                                             batch_count));
}

void gemm_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, cudaStream_t stream) {
  gemm_strided_batched_cublas(trans_a, trans_b, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc,
                              0, 1, stream);
}

}  // namespace echelon::cuda
