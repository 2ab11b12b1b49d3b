// CUDA emulation: the cuBLAS stand-in (see cublas.h for why a plain reference GEMM).
#include <echelon/cuda/sim/cublas.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include <cuda_bf16.h>  // the emulated __float2bfloat16_rn
#include <echelon/cuda/sim/internal.h>
#include <mma.h>  // the emulated __float_to_tf32

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

using echelon::cudasim::detail::Where;

// Elements a column-major rows x cols matrix with leading dimension ld spans.
long long extent(long long rows, long long cols, long long ld) {
  return rows == 0 || cols == 0 ? 0 : (cols - 1) * ld + rows;
}

bool inside_device(const float* p, long long elements) {
  return elements == 0 || echelon::cudasim::detail::where(
                              p, static_cast<size_t>(elements) * sizeof(float)) == Where::Device;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{device, nullptr};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_DEFAULT_MATH && mode != CUBLAS_PEDANTIC_MATH &&
      mode != CUBLAS_TF32_TENSOR_OP_MATH)
    return CUBLAS_STATUS_INVALID_VALUE;  // the deprecated TENSOR_OP mode is not emulated
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return "cuBLAS error";
  }
}

namespace {

// How the reference GEMM rounds its inputs.
enum class Inputs { Fp32, Tf32, Bf16 };

cublasStatus_t reference_gemm(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, long long stride_a, const float* B, int ldb,
                              long long stride_b, const float* beta, float* C, int ldc,
                              long long stride_c, int batch_count, Inputs inputs) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  // op(A) is m x k, op(B) is k x n, C is m x n; A is stored (ta ? k x m : m x k), column-major.
  const long long a_rows = ta ? k : m, a_cols = ta ? m : k;
  const long long b_rows = tb ? n : k, b_cols = tb ? k : n;
  if (m < 0 || n < 0 || k < 0 || batch_count < 0 || lda < std::max(1LL, a_rows) ||
      ldb < std::max(1LL, b_rows) || ldc < std::max(1, m) || transa > CUBLAS_OP_C ||
      transb > CUBLAS_OP_C)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0 || batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  const long long last = batch_count - 1;
  const bool reads_ab = k > 0 && *alpha != 0.0f;
  if ((reads_ab && (!inside_device(A + last * stride_a, extent(a_rows, a_cols, lda)) ||
                    !inside_device(A, extent(a_rows, a_cols, lda)) ||
                    !inside_device(B + last * stride_b, extent(b_rows, b_cols, ldb)) ||
                    !inside_device(B, extent(b_rows, b_cols, ldb)))) ||
      !inside_device(C, extent(m, n, ldc)) ||
      !inside_device(C + last * stride_c, extent(m, n, ldc))) {
    echelon::cudasim::detail::fail(
        cudaErrorIllegalAddress,
        "cublasSgemm: a matrix (m=" + std::to_string(m) + ", n=" + std::to_string(n) +
            ", k=" + std::to_string(k) + ", lda=" + std::to_string(lda) +
            ", ldb=" + std::to_string(ldb) + ", ldc=" + std::to_string(ldc) +
            ", batch=" + std::to_string(batch_count) + ") reaches outside device memory");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const float al = *alpha, be = *beta;  // pointer mode host: read at the call
  // TF32 or bf16 tensor-op math: each product's inputs rounded, as cpu::gemm_tf32 / gemm_bf16 do.
  const auto input = [inputs](float v) {
    return inputs == Inputs::Tf32   ? nvcuda::wmma::__float_to_tf32(v)
           : inputs == Inputs::Bf16 ? __bfloat162float(__float2bfloat16_rn(v))
                                    : v;
  };
  const cudaError_t err = echelon::cudasim::detail::enqueue(handle->stream, [=] {
    if (echelon::cudasim::detail::failed()) return;
    for (long long batch = 0; batch < batch_count; ++batch) {
      const float* a = A + batch * stride_a;
      const float* b = B + batch * stride_b;
      float* c = C + batch * stride_c;
      for (long long j = 0; j < n; ++j)
        for (long long i = 0; i < m; ++i) {
          double acc = 0.0;
          for (long long p = 0; p < k; ++p) {
            const float av = input(ta ? a[i * lda + p] : a[p * lda + i]);
            const float bv = input(tb ? b[p * ldb + j] : b[j * ldb + p]);
            acc += static_cast<double>(av) * bv;
          }
          float& out = c[j * ldc + i];
          // beta == 0: C is not read (it may hold NaN), as cuBLAS specifies.
          out = be == 0.0f ? static_cast<float>(al * acc)
                           : static_cast<float>(al * acc + static_cast<double>(be) * out);
        }
    }
    echelon::cudasim::detail::check_guards("cublasSgemm");
  });
  return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* A, int lda,
                                         long long stride_a, const float* B, int ldb,
                                         long long stride_b, const float* beta, float* C, int ldc,
                                         long long stride_c, int batch_count) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  return reference_gemm(handle, transa, transb, m, n, k, alpha, A, lda, stride_a, B, ldb, stride_b,
                        beta, C, ldc, stride_c, batch_count,
                        handle->math == CUBLAS_TF32_TENSOR_OP_MATH ? Inputs::Tf32 : Inputs::Fp32);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType a_type,
                                          int lda, long long stride_a, const void* B,
                                          cudaDataType b_type, int ldb, long long stride_b,
                                          const void* beta, void* C, cudaDataType c_type, int ldc,
                                          long long stride_c, int batch_count,
                                          cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (a_type != CUDA_R_32F || b_type != CUDA_R_32F || c_type != CUDA_R_32F ||
      algo != CUBLAS_GEMM_DEFAULT)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  Inputs inputs = Inputs::Fp32;
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      break;
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      inputs = Inputs::Tf32;
      break;
    case CUBLAS_COMPUTE_32F_FAST_16BF:
      inputs = Inputs::Bf16;
      break;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  return reference_gemm(handle, transa, transb, m, n, k, static_cast<const float*>(alpha),
                        static_cast<const float*>(A), lda, stride_a, static_cast<const float*>(B),
                        ldb, stride_b, static_cast<const float*>(beta), static_cast<float*>(C), ldc,
                        stride_c, batch_count, inputs);
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0,
                                   beta, C, ldc, 0, 1);
}
