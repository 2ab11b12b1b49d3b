// Row-major GEMM, two ways: our tiled SGEMM and cuBLAS. CPU twins: tensor/cpu/matmul.cpp (fp32;
// cpu::gemm_tf32 and cpu::gemm_bf16 for the tensor-core precisions).
//
// Our kernel: the block tiles of cuda/kernels/gemm_tile.cuh and mma_tile.cuh (a ring of
// k-slices in shared memory, FMA, TF32 or bf16 WMMA) with a dense operand loader:
// bounds-checked (zero-filled), so any M, N, K and both transposes work; the global load mapping
// follows the storage order (k fastest for row-major A, m fastest for transposed A). An operand
// whose pointer, leading dimension and batch stride are multiples of 16 bytes is read 16 bytes
// at a time: by cp.async straight into shared memory when its rows run along the shared rows
// (transposed A, plain B; fp32 and TF32) or, with set_mma_async_k / ECHELON_MMA_ASYNC_K=1, in
// the TF32 128x128 tile whatever its direction (into [m][k] / [n][k] rows), else by float4
// loads into registers; others element by element.
// Two tile shapes for FMA: 128x128 (8x8 per thread: 64 FMAs per 4 shared vector loads) for large
// problems, 64x64 (4x4 per thread) when 128x128 tiles would leave SMs idle; use_large_tile
// decides. The 128x128 FMA tile runs the warp-tiled core (fma_tile.cuh; 128 registers, 2 blocks
// per SM) unless set_fma_warp_tiles(false) / ECHELON_FMA_CORE=old keeps the block-strided one
// (213 registers, 1 block); the same bits either way. TF32 and bf16
// (set_float32_precision(Precision::Tf32 / Bf16)) run on tensor cores (mma_tile.cuh; bf16:
// operands rounded to bf16 when staged, fp32 accumulators): the 128x128 tile, two MMA k-steps per
// staged slice, when mma_large_tile_for says so (M, N >= 128 and a wave of blocks;
// ECHELON_MMA_TILE=64 / 128 force a tile), else the 64x64 one; the epilogue goes through a 16x16
// scratch per warp, so that the bounds checks, alpha, beta, the bias and the ReLU clamp stay per
// element as in the FMA kernel.
// Batch-reduce mode (split-K over a batch): block z sums the products of batches
// [z * per_block, (z + 1) * per_block) in registers and writes C + z * stride_c once.
// cuBLAS is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so we
// call it with the operands swapped and the same transpose flags (the "swap trick"); no copies.
// Under TF32 its handle's math mode allows TF32 tensor-core kernels; under bf16 it runs
// cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F_FAST_16BF (fp32 matrices, inputs
// down-converted to bf16 inside, fp32 accumulation).
#include <echelon/cuda/kernels/matmul.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <type_traits>

#include <echelon/cuda/blas.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/switches.h>

#include "fma_tile.cuh"
#include "gemm_tile.cuh"
#include "mma_tile.cuh"

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

using namespace tile;

// The arguments both kernels share. Block (x, y, z) computes the tile at rows m0 = y * kM,
// columns n0 = x * kN of C[z] = alpha * sum over the batches b of group z of op(A_b) op(B_b) +
// beta * C[z] (+ row_bias), z = group0 + blockIdx.z; group z holds batches [z * per_block,
// min(batch, (z + 1) * per_block)). The kernels take the fields as separate arguments (so that
// the emulation checks that each pointer is device memory) and gather them here.
struct GemmArgs {
  bool trans_a, trans_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  int64_t lda, stride_a;
  const float* B;
  int64_t ldb, stride_b;
  float beta;
  float* C;
  int64_t ldc, stride_c, batch, per_block, group0;
  const float* row_bias;
  bool relu;  // the store clamps at zero (a runtime flag: no extra instantiations)
};

// Whether a dense operand's runs of 4 along its contiguous dimension are 16-byte aligned in
// every batch.
__device__ __forceinline__ bool vector_ok(const float* p, int64_t ld, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % (kVec * sizeof(float)) == 0 && ld % kVec == 0 &&
         stride % kVec == 0;
}

// The operand loader (cuda/kernels/gemm_tile.cuh) of batch b's dense, possibly transposed
// matrices; loads are bounds-checked (zero-filled), so any M, N, K work.
struct DenseOperands {
  const GemmArgs& g;
  const float* A;  // batch b's
  const float* B;

  __device__ bool a_k_fastest() const { return !g.trans_a; }  // row-major (M, K)
  __device__ bool b_k_fastest() const { return g.trans_b; }   // transposed storage (N, K)
  __device__ bool a_vector() const { return vector_ok(g.A, g.lda, g.stride_a); }
  __device__ bool b_vector() const { return vector_ok(g.B, g.ldb, g.stride_b); }
  __device__ float a(int64_t m, int64_t k) const {
    if (m >= g.M || k >= g.K) return 0.0f;
    return g.trans_a ? A[k * g.lda + m] : A[m * g.lda + k];
  }
  __device__ float b(int64_t k, int64_t n) const {
    if (n >= g.N || k >= g.K) return 0.0f;
    return g.trans_b ? B[n * g.ldb + k] : B[k * g.ldb + n];
  }
  __device__ int a_span(int64_t m, int64_t k, const float*& p) const {
    p = A;
    if (m >= g.M || k >= g.K) return 0;
    p = g.trans_a ? A + k * g.lda + m : A + m * g.lda + k;
    return static_cast<int>(min(int64_t{kVec}, g.trans_a ? g.M - m : g.K - k));
  }
  __device__ int b_span(int64_t k, int64_t n, const float*& p) const {
    p = B;
    if (n >= g.N || k >= g.K) return 0;
    p = g.trans_b ? B + n * g.ldb + k : B + k * g.ldb + n;
    return static_cast<int>(min(int64_t{kVec}, g.trans_b ? g.K - k : g.N - n));
  }
};

// Runs the block's k-slices through for_each_slice: over the group's batches, then k, s =
// (batch, k0 / T::kK).
template <typename T, typename Multiply>
__device__ __forceinline__ void for_each_group_slice(const GemmArgs& g, int64_t m0, int64_t n0,
                                                     ATiles<T>& a_tile, BTiles<T>& b_tile,
                                                     Multiply multiply) {
  const int64_t group = g.group0 + blockIdx.z;
  const int64_t b_begin = group * g.per_block, b_end = min(g.batch, b_begin + g.per_block);
  const int64_t k_slices = (g.K + T::kK - 1) / T::kK;
  const int64_t slices = b_end > b_begin ? (b_end - b_begin) * k_slices : 0;
  const bool batch_reduce = b_end - b_begin > 1;
  const auto locate = [&](int64_t s, auto&& f) {
    // One batch in the group (the usual case): s is the k-slice, no 64-bit division per slice.
    int64_t b = b_begin, slice = s;
    if (batch_reduce) {
      const int64_t batches_before = s / k_slices;
      b += batches_before, slice = s - batches_before * k_slices;
    }
    const int64_t k0 = slice * T::kK;
    f(DenseOperands{g, g.A + b * g.stride_a, g.B + b * g.stride_b}, k0);
  };
  const Staging st = staging_of<T>(DenseOperands{g, g.A, g.B});
  for_each_slice<T>(slices, st, m0, n0, a_tile, b_tile, locate, multiply);
}

// C(m, n) of the block's group = alpha * acc + beta * C(m, n) + row_bias[m], ReLU'd with relu
// (the fused epilogue of the conv forward), for m < M and n < N.
__device__ __forceinline__ void store_element(const GemmArgs& g, int64_t m, int64_t n, float acc) {
  if (m >= g.M || n >= g.N) return;
  const float bias = g.row_bias ? g.row_bias[m] : 0.0f;
  float* c = g.C + (g.group0 + blockIdx.z) * g.stride_c + m * g.ldc + n;
  // beta == 0 must not read C: it may hold NaN (the contract in tensor/cpu/matmul.h).
  const float v = (g.beta == 0.0f ? g.alpha * acc : fmaf(g.beta, *c, g.alpha * acc)) + bias;
  // The clamp of relu_inplace (cuda/kernels/conv.cu), bit for bit: NaN becomes 0 there too.
  *c = !g.relu || v > 0.0f ? v : 0.0f;
}

// The warp-tiled tile at 2 resident blocks per SM (128 registers, no spill: bench/RESULTS.md,
// fma24); the block-strided ones at ptxas's choice (213 and 91 registers).
template <typename T>
__global__ void __launch_bounds__(kThreads, (T::kWarpTiled ? 2 : 0))
    sgemm_tiled_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* __restrict__ A, int64_t lda, int64_t stride_a,
                       const float* __restrict__ B, int64_t ldb, int64_t stride_b, float beta,
                       float* __restrict__ C, int64_t ldc, int64_t stride_c, int64_t batch,
                       int64_t per_block, int64_t group0, const float* __restrict__ row_bias,
                       bool relu) {
  const GemmArgs g{trans_a, trans_b,  M,     N,         K,        alpha,    A,
                   lda,     stride_a, B,     ldb,       stride_b, beta,     C,
                   ldc,     stride_c, batch, per_block, group0,   row_bias, relu};
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kN;
  __shared__ __align__(16) ATiles<T> a_tile;  // [k][m] = op(A)(m0+m, k0+k)
  __shared__ __align__(16) BTiles<T> b_tile;  // [k][n] = op(B)(k0+k, n0+n)
  const auto store = [&](int64_t m, int64_t n, float v) { store_element(g, m, n, v); };
  if constexpr (T::kWarpTiled) {
    FmaWarps<T> warps;
    for_each_group_slice<T>(g, m0, n0, a_tile, b_tile,
                            [&](int cur) { warps.multiply(a_tile[cur], b_tile[cur]); });
    warps.store_tile(m0, n0, store);
  } else {
    const int thread_col = threadIdx.x % T::kCols, thread_row = threadIdx.x / T::kCols;
    float acc[T::kThM][T::kThN] = {};
    for_each_group_slice<T>(g, m0, n0, a_tile, b_tile, [&](int cur) {
      multiply_slice<T>(a_tile[cur], b_tile[cur], thread_row, thread_col, acc);
    });
    store_fma_tile<T>(acc, m0, n0, thread_row, thread_col, store);
  }
}

// ---- the tensor-core variant: TF32 or bf16 by T's element type ----

// The 64x64 TF32 tile at 3 resident blocks per SM (__launch_bounds__: 120 -> 80 registers, no
// spill; as conv_min_blocks in conv_gemm.cu: a hypothesis for the GPU run); the bf16 one and the
// 128x128 tiles (mma_tile.cuh) stay at ptxas's choice (64x64 bf16: 76 registers, 3 blocks
// already; 4 would spill).
// The deep async-K TF32 tile asks for 1: left to ptxas since the m16n8k8 fragments (session 41)
// it took 128 registers and spilled 4 bytes (64 bytes of reloads).
template <typename T>
constexpr int mma_min_blocks() {
  if constexpr (std::is_same_v<T, SmallTile>)
    return 3;
  else
    return std::is_same_v<T, Tf32DeepAsyncKTile> ? 1 : 0;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, (mma_min_blocks<T>()))
    sgemm_mma_kernel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                     const float* __restrict__ A, int64_t lda, int64_t stride_a,
                     const float* __restrict__ B, int64_t ldb, int64_t stride_b, float beta,
                     float* __restrict__ C, int64_t ldc, int64_t stride_c, int64_t batch,
                     int64_t per_block, int64_t group0, const float* __restrict__ row_bias,
                     bool relu) {
  const GemmArgs g{trans_a, trans_b,  M,     N,         K,        alpha,    A,
                   lda,     stride_a, B,     ldb,       stride_b, beta,     C,
                   ldc,     stride_c, batch, per_block, group0,   row_bias, relu};
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // TF32 and bf16 tensor cores need sm_80 or newer
#else
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * T::kM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * T::kN;
  if constexpr (kDynamicRing<T>) {
    ECH_DYNAMIC_SHARED_ALIGNED(MmaShared<T>, smem, 128);  // the launch's mma_dynamic_shared<T>()
    MmaWarps<T> warps;
    for_each_group_slice<T>(g, m0, n0, smem->a, smem->b, [&](int cur, const Staging& st) {
      warps.multiply(smem->a[cur], smem->b[cur], st);  // AsyncK stages are [d][k]
    });
    warps.store_tile(smem->scratch[threadIdx.x / 32], m0, n0,
                     [&](int64_t m, int64_t n, float v) { store_element(g, m, n, v); });
  } else {
    // 32-byte aligned rows of (kM + kPad) * sizeof(Elem) bytes: every fragment pointer is 32-byte
    // aligned (mma_tile.cuh).
    __shared__ __align__(32) ATiles<T> a_tile;                      // [k][m] = op(A)(m0+m, k0+k)
    __shared__ __align__(32) BTiles<T> b_tile;                      // [k][n] = op(B)(k0+k, n0+n)
    __shared__ __align__(32) float scratch[kWarps][kFrag * kFrag];  // one accumulator, row-major
    MmaWarps<T> warps;
    for_each_group_slice<T>(g, m0, n0, a_tile, b_tile, [&](int cur, const Staging& st) {
      warps.multiply(a_tile[cur], b_tile[cur], st);  // st: what to round
    });
    warps.store_tile(scratch[threadIdx.x / 32], m0, n0,
                     [&](int64_t m, int64_t n, float v) { store_element(g, m, n, v); });
  }
#endif
}

constexpr int64_t kMaxGridY = 65535, kMaxGridZ = 65535;

std::atomic<Precision> g_precision{Precision::Fp32};

std::atomic<bool>& warp_tiles_flag() {
  static std::atomic<bool> flag = switches::fma_warp_tiles();
  return flag;
}

void check_gemm_args(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     int64_t lda, int64_t ldb, int64_t ldc, int64_t batch) {
  ECH_CHECK(M >= 0 && N >= 0 && K >= 0 && batch >= 0, op, ": negative size (M=", M, ", N=", N,
            ", K=", K, ", batch=", batch, ")");
  ECH_CHECK(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N) && ldc >= N, op,
            ": leading dimension too small (M=", M, ", N=", N, ", K=", K, ", lda=", lda,
            ", ldb=", ldb, ", ldc=", ldc, ", trans_a=", trans_a, ", trans_b=", trans_b, ")");
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// The large tile only when it still gives every SM work; else the small one.
bool use_large_tile(int64_t M, int64_t N, int64_t groups) {
  return M >= LargeTile::kM && N >= LargeTile::kN &&
         ceil_div(M, LargeTile::kM) * ceil_div(N, LargeTile::kN) * groups >= kFillBlocks;
}

// The tensor-core tile mode (matmul.h, set_mma_tile): ECHELON_MMA_TILE=64 / 128 in the
// environment (read once) forces one tile; else (or =auto) Auto.
std::atomic<MmaTile>& mma_tile_mode() {
  static std::atomic<MmaTile> mode = switches::mma_tile();
  return mode;
}

// The 128x128 TF32 tile's ring depth (matmul.h, set_mma_stages): ECHELON_MMA_STAGES=4 in the
// environment (read once) starts the process with the deep ring; else (or =2) 2.
std::atomic<int>& mma_stages_setting() {
  static_assert(kDeepStages == 4, "ECHELON_MMA_STAGES names the deep ring 4");
  static std::atomic<int> stages = switches::mma_stages();
  return stages;
}

// The async-K TF32 tiles (matmul.h, set_mma_async_k): ECHELON_MMA_ASYNC_K=1 in the environment
// (read once) starts the process with them; else off.
std::atomic<bool>& mma_async_k_flag() {
  static std::atomic<bool> flag = switches::mma_async_k();
  return flag;
}

// kMma: the tensor-core kernel (TF32 or bf16 by T), else the FMA one (float tiles only).
template <typename T, bool kMma>
constexpr auto sgemm_kernel() {
  if constexpr (kMma)
    return sgemm_mma_kernel<T>;
  else
    return sgemm_tiled_kernel<T>;
}

template <typename T, bool kMma>
void launch_tile(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                 float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                 int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c,
                 int64_t batch, int64_t per_block, const float* row_bias, bool relu,
                 cudaStream_t stream) {
  const int64_t tiles_m = ceil_div(M, T::kM), tiles_n = ceil_div(N, T::kN);
  ECH_CHECK(tiles_m <= kMaxGridY && tiles_n <= INT_MAX, op, ": matrix too large for the tiled ",
            "kernel's grid (M=", M, ", N=", N, ")");
  const int64_t groups = ceil_div(batch, per_block);
  constexpr size_t dynamic_shared = mma_dynamic_shared<T>();
  if constexpr (dynamic_shared > 0) opt_in_dynamic_shared<sgemm_kernel<T, kMma>()>(dynamic_shared);
  // Groups beyond gridDim.z's limit go in several launches.
  for (int64_t group0 = 0; group0 < groups; group0 += kMaxGridZ) {
    const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m),
                    static_cast<unsigned>(std::min(kMaxGridZ, groups - group0)));
    [[maybe_unused]] const char* name = !kMma ? "sgemm_tiled_kernel"
                                        : std::is_same_v<typename T::Elem, float>
                                            ? "sgemm_tf32_kernel"
                                            : "sgemm_bf16_kernel";
    ECH_LAUNCH_NAMED(name, grid, kThreads, dynamic_shared, stream, (sgemm_kernel<T, kMma>()))
    (trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c,
     batch, per_block, group0, row_bias, relu);
    ECH_CUDA_CHECK_LAUNCH(op);
  }
}

// per_block == 1: an ordinary strided batch; > 1: batch-reduce mode (see the top).
void launch_tiled(const char* op, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const float* A, int64_t lda, int64_t stride_a, const float* B,
                  int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                  int64_t stride_c, int64_t batch, cudaStream_t stream, int64_t per_block = 1,
                  const float* row_bias = nullptr, bool relu = false) {
  check_gemm_args(op, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch);
  if (M == 0 || N == 0 || batch == 0) return;
  const Precision precision = float32_precision();
  const bool mma_large = mma_large_tile_for(
      M, N,
      ceil_div(M, Tf32LargeTile::kM) * ceil_div(N, Tf32LargeTile::kN) * ceil_div(batch, per_block));
  const bool tf32_large = precision == Precision::Tf32 && mma_large;
  if (tf32_large && mma_async_k() && mma_stages() == kDeepStages)
    launch_tile<Tf32DeepAsyncKTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B,
                                          ldb, stride_b, beta, C, ldc, stride_c, batch, per_block,
                                          row_bias, relu, stream);
  else if (tf32_large && mma_async_k())
    launch_tile<Tf32AsyncKTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B,
                                      ldb, stride_b, beta, C, ldc, stride_c, batch, per_block,
                                      row_bias, relu, stream);
  else if (tf32_large && mma_stages() == kDeepStages)
    launch_tile<Tf32DeepTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                    stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                    relu, stream);
  else if (tf32_large)
    launch_tile<Tf32LargeTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                     stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                     relu, stream);
  else if (precision == Precision::Bf16 && mma_large)
    launch_tile<Bf16LargeTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                     stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                     relu, stream);
  else if (precision == Precision::Tf32)
    launch_tile<SmallTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                 stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias, relu,
                                 stream);
  else if (precision == Precision::Bf16)
    launch_tile<Bf16SmallTile, true>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                     stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                     relu, stream);
  else if (use_large_tile(M, N, ceil_div(batch, per_block)) && fma_warp_tiles())
    launch_tile<LargeWarpTile, false>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B,
                                      ldb, stride_b, beta, C, ldc, stride_c, batch, per_block,
                                      row_bias, relu, stream);
  else if (use_large_tile(M, N, ceil_div(batch, per_block)))
    launch_tile<LargeTile, false>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                  stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                  relu, stream);
  else
    launch_tile<SmallTile, false>(op, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
                                  stride_b, beta, C, ldc, stride_c, batch, per_block, row_bias,
                                  relu, stream);
}

int to_int(int64_t value, const char* what, const char* op) {
  ECH_CHECK(value <= INT_MAX, op, ": ", what, " = ", value, " exceeds cuBLAS's 32-bit limit");
  return static_cast<int>(value);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

void set_float32_precision(Precision precision) {
  g_precision.store(precision);
}
Precision float32_precision() {
  return g_precision.load();
}

void set_fma_warp_tiles(bool on) {
  warp_tiles_flag().store(on, std::memory_order_relaxed);
}
bool fma_warp_tiles() {
  return warp_tiles_flag().load(std::memory_order_relaxed);
}

void set_mma_tile(MmaTile tile) {
  mma_tile_mode().store(tile, std::memory_order_relaxed);
}
MmaTile mma_tile() {
  return mma_tile_mode().load(std::memory_order_relaxed);
}

void set_mma_stages(int stages) {
  ECH_CHECK(stages == 2 || stages == kDeepStages, "set_mma_stages: 2 or ", kDeepStages,
            " stages, got ", stages);
  mma_stages_setting().store(stages, std::memory_order_relaxed);
}
int mma_stages() {
  return mma_stages_setting().load(std::memory_order_relaxed);
}
int mma_deep_stages() {
  return kDeepStages;
}

void set_mma_async_k(bool on) {
  mma_async_k_flag().store(on, std::memory_order_relaxed);
}
bool mma_async_k() {
  return mma_async_k_flag().load(std::memory_order_relaxed);
}

// Auto: the 128x128 tile once its blocks fill one wave of one block per SM (kMmaFillBlocks: it
// does 4x a 64x64 block's work, and 43 KiB of shared memory and its registers leave few blocks
// resident; a hypothesis for the GPU's A/B rows to tune); the emulation uses kFillBlocks.
bool mma_large_tile_for(int64_t M, int64_t N, int64_t blocks) {
#if ECHELON_CUDA_SIM
  constexpr int64_t kMmaFillBlocks = kFillBlocks;
#else
  constexpr int64_t kMmaFillBlocks = 132;
#endif
  const MmaTile mode = mma_tile();
  return mode != MmaTile::Small && M >= Tf32LargeTile::kM && N >= Tf32LargeTile::kN &&
         (mode == MmaTile::Large || blocks >= kMmaFillBlocks);
}

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

void gemm_strided_batched_row_bias(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                                   const float* A, int64_t lda, int64_t stride_a, const float* B,
                                   int64_t ldb, int64_t stride_b, const float* row_bias, float* C,
                                   int64_t ldc, int64_t stride_c, int64_t batch, bool relu,
                                   cudaStream_t stream) {
  launch_tiled("gemm_strided_batched_row_bias", trans_a, trans_b, M, N, K, 1.0f, A, lda, stride_a,
               B, ldb, stride_b, 0.0f, C, ldc, stride_c, batch, stream, 1, row_bias, relu);
}

void gemm_batch_reduce(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                       const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb,
                       int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c,
                       int64_t batch, int64_t per_group, cudaStream_t stream) {
  ECH_CHECK(per_group >= 1, "gemm_batch_reduce: per_group must be >= 1, got ", per_group);
  launch_tiled("gemm_batch_reduce", trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb,
               stride_b, beta, C, ldc, stride_c, batch, stream, per_group);
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
  const Precision precision = float32_precision();
  ECH_CUBLAS_CHECK(cublasSetMathMode(
      handle, precision == Precision::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  if (precision == Precision::Bf16) {  // no math mode means bf16: the compute type does
    ECH_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, op_b, op_a, n, m, k, &alpha, B, CUDA_R_32F, ld_b, stride_b, A, CUDA_R_32F, ld_a,
        stride_a, &beta, C, CUDA_R_32F, ld_c, stride_c, to_int(batch, "batch", op),
        CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
    return;
  }
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
