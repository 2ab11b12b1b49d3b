// Launchers of cuda/kernels/matmul.cu. The contract (row-major, trans flags, leading dims,
// beta == 0 does not read C) is the one documented in tensor/cpu/matmul.h. Two implementations:
// `gemm*` is our tiled SGEMM kernel, `gemm*_cublas` calls cuBLAS (column-major under the hood:
// row-major C = A B is column-major C^T = B^T A^T). float only; device pointers.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/base/op_kinds.h>

namespace echelon::cuda {

// Process-wide, like ops::deterministic (ops::set_float32_precision forwards here). Tf32: `gemm*`
// run the tensor-core kernel (CPU twin cpu::gemm_tf32), `gemm*_cublas` let cuBLAS use TF32
// tensor cores, and cuDNN convolutions prefer tensor-op math. Bf16: the tensor-core kernel on
// operands rounded to bf16 (twin cpu::gemm_bf16), cuBLAS with CUBLAS_COMPUTE_32F_FAST_16BF, cuDNN
// as under Tf32. Fp32 (the default): plain fp32 FMA in our kernels and cuBLAS's default math.
void set_float32_precision(Precision precision);
Precision float32_precision();

// The FMA core of the 128x128 fp32 tile of `gemm*` and the implicit-GEMM convolution: true (the
// default) the warp-tiled one at 128 registers (cuda/kernels/fma_tile.cuh), false the previous
// block-strided one (multiply_slice, fma_tile.cuh); both compute each output's fmaf chain in the
// same k order (bit-identical results). ECHELON_FMA_CORE=old starts the process with false: an
// A/B switch for timing the two.
void set_fma_warp_tiles(bool on);
bool fma_warp_tiles();

// The tensor-core kernels' block tile (cuda/kernels/mma_tile.cuh), an A/B switch for timing and
// tests (both equal the CPU twins to summation order). Auto (the default): the 128x128 tile where
// M, N >= 128 and its blocks still fill the GPU (mma_large_tile_for), else 64x64; Small: always
// the 64x64 tile (the environment's ECHELON_MMA_TILE=64); Large: the 128x128 tile wherever
// M, N >= 128 (ECHELON_MMA_TILE=128). Process-wide; read by the SGEMM and the implicit-GEMM
// convolution under TF32 and bf16.
enum class MmaTile { Auto, Small, Large };
void set_mma_tile(MmaTile tile);
MmaTile mma_tile();
// The TF32 128x128 tile's ring of k-slices in shared memory (mma_tile.cuh), an A/B switch for
// timing and tests (the same bits either way): 2 stages (the default; static shared memory) or
// mma_deep_stages() = 4 (cp.async 3 slices ahead, 76 KiB of dynamic shared memory). The
// environment's ECHELON_MMA_STAGES=4 starts the process with 4. Process-wide; read by the SGEMM
// and by the implicit-GEMM convolution's heuristic where it stages by cp.async (the async-K
// tiles, set_mma_async_k; the gather tiles, conv_gemm.h's set_conv_async_gather: the
// register-staged conv tile ignores it); bf16 has no deep ring (mma_tile.cuh: no cp.async there
// either). Other counts fail.
void set_mma_stages(int stages);
int mma_stages();
int mma_deep_stages();
// Whether the TF32 128x128 tile stages its k-contiguous aligned operands (row-major A, transposed
// B) by cp.async too, into [m][k] / [n][k] shared rows (mma_tile.cuh's async-K tiles, 2 or
// mma_stages() stages, dynamic shared memory) instead of float4 registers one slice ahead. An
// A/B switch (the same bits either way); off by default; ECHELON_MMA_ASYNC_K=1 in the
// environment starts the process with it on. Read by the SGEMM and by the implicit-GEMM conv's
// heuristic (ConvConfig::async_k, with mma_stages()'s depth; forward and weight gradient).
void set_mma_async_k(bool on);
bool mma_async_k();
// Whether a TF32 / bf16 GEMM of M x N in `blocks` 128x128 blocks (tiles x batch groups; a
// split-K launch passes the blocks it can split to) takes the 128x128 tile under mma_tile().
bool mma_large_tile_for(int64_t M, int64_t N, int64_t blocks);

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
          cudaStream_t stream);
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, int64_t stride_a, const float* B,
                          int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                          int64_t stride_c, int64_t batch, cudaStream_t stream);
// C_b (M, N) = op(A_b) op(B_b) + row_bias (M) broadcast over the columns (row_bias null: none),
// for each batch b, with relu then clamped at zero (NaN -> 0, as relu_inplace): the convolution
// forward (conv2d_relu's too) with its bias and ReLU fused into the GEMM epilogue (no second
// pass over y; relu is a runtime argument, no extra kernel instantiations). Its CPU twin is the
// conv2d twin's (tensor/cpu/conv.h) then the ReLU twin's, checked by the conv parity cases.
void gemm_strided_batched_row_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                   const float* A, int64_t lda, int64_t stride_a, const float* B,
                                   int64_t ldb, int64_t stride_b, const float* row_bias, float* C,
                                   int64_t ldc, int64_t stride_c, int64_t batch, bool relu,
                                   cudaStream_t stream);
// Batch-reduce (split-K over a batch): for each group g of per_group consecutive batches,
// C_g (M, N) = alpha * sum over b in the group of op(A_b) op(B_b) + beta * C_g, where A_b = A +
// b * stride_a, B_b = B + b * stride_b, C_g = C + g * stride_c; ceil(batch / per_group) groups.
// Each group's sum is accumulated in one block's registers in batch order (deterministic).
void gemm_batch_reduce(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb,
                       int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c,
                       int64_t batch, int64_t per_group, cudaStream_t stream);

void gemm_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                 const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                 int64_t ldc, cudaStream_t stream);
void gemm_strided_batched_cublas(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                 float alpha, const float* A, int64_t lda, int64_t stride_a,
                                 const float* B, int64_t ldb, int64_t stride_b, float beta,
                                 float* C, int64_t ldc, int64_t stride_c, int64_t batch,
                                 cudaStream_t stream);

}  // namespace echelon::cuda
