// Dispatch for the matmul family. Operands are passed to GEMM in place whenever their layout
// allows (row-major with a leading dimension, or a transposed view of one, which flips the
// trans flag); anything else is made contiguous first.
#include <atomic>

#include <echelon/tensor/cpu/fast/gemm.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/matmul.h>
#endif
#if ECHELON_WITH_BLAS
#include <cblas.h>
#endif

namespace echelon::ops {
namespace {

std::atomic<MatmulImpl> g_matmul_impl{MatmulImpl::Auto};
std::atomic<CpuKernels> g_cpu_kernels{CpuKernels::Fast};
std::atomic<int> g_cpu_threads{0};
std::atomic<int> g_blas_default_threads{0};  // OpenBLAS's own count, saved at the first set

// One GEMM operand: the tensor whose memory is read, its leading dim and effective trans flag.
struct Operand {
  Tensor tensor;
  int64_t ld = 0;
  bool trans = false;
};

// `t`'s last two dims as a GEMM operand: (rows, cols) with unit column stride, or its
// transpose with unit row stride.
Operand as_operand(const Tensor& t, bool trans) {
  const int64_t r = t.dim() - 2, c = t.dim() - 1;
  const int64_t rows = t.shape()[r], cols = t.shape()[c];
  if (t.strides()[c] == 1 && t.strides()[r] >= std::max<int64_t>(cols, 1))
    return {t, t.strides()[r], trans};
  if (t.strides()[r] == 1 && t.strides()[c] >= std::max<int64_t>(rows, 1))
    return {t, t.strides()[c], !trans};
  const Tensor packed = t.contiguous();
  return {packed, std::max<int64_t>(cols, 1), trans};
}

// Batch stride of a 3-D operand (0 for a batch-broadcast view, which is fine: it is only read).
int64_t batch_stride(const Operand& op) {
  return op.tensor.strides()[0];
}

bool use_blas_on_cpu(const char* opname) {
  const MatmulImpl impl = g_matmul_impl.load();
  if (impl == MatmulImpl::Blas)
    ECH_CHECK(cpu::blas_available(), opname,
              ": MatmulImpl::Blas requested but Echelon was built without OpenBLAS");
  return (impl == MatmulImpl::Blas || impl == MatmulImpl::Auto) && cpu::blas_available();
}

// C (batch, M, N) = alpha * op(A) op(B) + beta * C for prepared operands; batch 1 for 2-D.
void run_gemm(const char* opname, const Operand& a, const Operand& b, Tensor& c, int64_t batch,
              int64_t M, int64_t N, int64_t K, double alpha, double beta) {
  if (M == 0 || N == 0) return;
  const int64_t ldc = std::max<int64_t>(N, 1);
  const bool batched = c.dim() == 3;
  const int64_t sa = batched ? batch_stride(a) : 0, sb = batched ? batch_stride(b) : 0;
  const int64_t sc = M * N;
#if ECHELON_WITH_CUDA
  if (c.is_cuda()) {
    detail::check_cuda_float(opname, c);
    cuda::DeviceGuard guard(c.device().index);
    cudaStream_t stream = cuda::current_stream(c.device().index);
    const MatmulImpl impl = g_matmul_impl.load();
    const bool cublas = impl == MatmulImpl::Blas || impl == MatmulImpl::Auto;
    const float* pa = a.tensor.data<float>();
    const float* pb = b.tensor.data<float>();
    float* pc = c.data<float>();
    const float fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
    if (cublas)
      cuda::gemm_strided_batched_cublas(a.trans, b.trans, M, N, K, fa, pa, a.ld, sa, pb, b.ld, sb,
                                        fb, pc, ldc, sc, batch, stream);
    else
      cuda::gemm_strided_batched(a.trans, b.trans, M, N, K, fa, pa, a.ld, sa, pb, b.ld, sb, fb, pc,
                                 ldc, sc, batch, stream);
    return;
  }
#endif
  const bool blas = use_blas_on_cpu(opname);
  ECH_DISPATCH_FLOATING(c.dtype(), opname, {
    const auto fa = static_cast<scalar_t>(alpha), fb = static_cast<scalar_t>(beta);
    const scalar_t* pa = a.tensor.data<scalar_t>();
    const scalar_t* pb = b.tensor.data<scalar_t>();
    scalar_t* pc = c.data<scalar_t>();
    if (blas && cpu_kernels() == CpuKernels::Fast)
      cpu::fast::gemm_strided_batched<scalar_t>(a.trans, b.trans, M, N, K, fa, pa, a.ld, sa, pb,
                                                b.ld, sb, fb, pc, ldc, sc, batch);
    else if (blas)
      cpu::gemm_strided_batched_blas<scalar_t>(a.trans, b.trans, M, N, K, fa, pa, a.ld, sa, pb,
                                               b.ld, sb, fb, pc, ldc, sc, batch);
    else
      cpu::gemm_strided_batched<scalar_t>(a.trans, b.trans, M, N, K, fa, pa, a.ld, sa, pb, b.ld, sb,
                                          fb, pc, ldc, sc, batch);
  });
}

void check_operands(const char* opname, const Tensor& a, const Tensor& b, int64_t rank) {
  detail::check_defined(opname, a, "first input");
  detail::check_defined(opname, b, "second input");
  ECH_CHECK(a.dim() == rank && b.dim() == rank, opname, ": expected ", rank,
            "-D inputs, got shapes ", a.shape(), " and ", b.shape());
  detail::check_same_dtype(opname, a, b);
  detail::check_same_device(opname, a, b);
  detail::check_floating(opname, a);
}

// (M, K) of op(a) and (K2, N) of op(b); throws naming both shapes when K differs.
void product_dims(const char* opname, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                  int64_t* M, int64_t* N, int64_t* K) {
  const int64_t r = a.dim() - 2;
  *M = trans_a ? a.shape()[r + 1] : a.shape()[r];
  *K = trans_a ? a.shape()[r] : a.shape()[r + 1];
  const int64_t k2 = trans_b ? b.shape()[r + 1] : b.shape()[r];
  *N = trans_b ? b.shape()[r] : b.shape()[r + 1];
  ECH_CHECK(*K == k2, opname, ": inner sizes differ: ", a.shape(), (trans_a ? "^T" : ""), " x ",
            b.shape(), (trans_b ? "^T" : ""), " (", *K, " vs ", k2, ")");
}

}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
#if ECHELON_WITH_BLAS
  if (g_cpu_threads.load() == 0) g_blas_default_threads.store(openblas_get_num_threads());
  openblas_set_num_threads(1);
#endif
  g_cpu_threads.store(threads);
  cpu::fast::set_num_threads(threads);
}

void reset_cpu_threads() {
#if ECHELON_WITH_BLAS
  if (g_cpu_threads.load() != 0) openblas_set_num_threads(g_blas_default_threads.load());
#endif
  g_cpu_threads.store(0);
  cpu::fast::set_num_threads(1);
}
int cpu_threads() {
  return g_cpu_threads.load();
}

void set_cpu_kernels(CpuKernels kernels) {
  g_cpu_kernels.store(kernels);
}
CpuKernels cpu_kernels() {
  return g_cpu_kernels.load();
}

void set_matmul_impl(MatmulImpl impl) {
  g_matmul_impl.store(impl);
}
MatmulImpl matmul_impl() {
  return g_matmul_impl.load();
}

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_operands("matmul", a, b, 2);
  int64_t M, N, K;
  product_dims("matmul", a, b, trans_a, trans_b, &M, &N, &K);
  Tensor c = Tensor::empty({M, N}, a.dtype(), a.device());
  run_gemm("matmul", as_operand(a, trans_a), as_operand(b, trans_b), c, 1, M, N, K, 1.0, 0.0);
  return c;
}

Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  check_operands("bmm", a, b, 3);
  ECH_CHECK(a.shape()[0] == b.shape()[0], "bmm: batch sizes differ: ", a.shape(), " vs ",
            b.shape());
  int64_t M, N, K;
  product_dims("bmm", a, b, trans_a, trans_b, &M, &N, &K);
  const int64_t batch = a.shape()[0];
  Tensor c = Tensor::empty({batch, M, N}, a.dtype(), a.device());
  run_gemm("bmm", as_operand(a, trans_a), as_operand(b, trans_b), c, batch, M, N, K, 1.0, 0.0);
  return c;
}

void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha,
           double beta) {
  check_operands("gemm_", a, b, 2);
  detail::check_defined("gemm_", c, "output");
  detail::check_same_dtype("gemm_", c, a);
  detail::check_same_device("gemm_", c, a);
  int64_t M, N, K;
  product_dims("gemm_", a, b, trans_a, trans_b, &M, &N, &K);
  ECH_CHECK(c.shape() == Shape({M, N}), "gemm_: output shape ", c.shape(), " should be ",
            Shape({M, N}), " for inputs ", a.shape(), " and ", b.shape());
  ECH_CHECK(c.is_contiguous(), "gemm_: output ", c.describe(), " must be contiguous");
  run_gemm("gemm_", as_operand(a, trans_a), as_operand(b, trans_b), c, 1, M, N, K, alpha, beta);
}

}  // namespace echelon::ops
