// Reductions (sum/mean/max/min, argmax) and the softmax family.
//
// Why two reduce kernels: the dispatch layer hands us an (outer, inner) problem. A long row
// (inner > 32) gets a whole block so that one output still uses the memory bandwidth of 256
// threads; short rows get one thread each, so that e.g. a (1e6, 3) reduction does not launch a
// million mostly idle blocks. Accumulation is in float with a tree at the end, so the result
// differs from the CPU twin's double accumulation by rounding only.
// Why a column kernel: a reduction over a non-inner dim (sum over the batch of an (N, F) tensor,
// bias gradients of a linear layer) has, after the permute, rows whose elements are far apart
// but neighbouring ROWS adjacent in memory. Row kernels would read with a stride; the column
// kernel gives 32 neighbouring outputs to the 32 lanes of a warp (coalesced loads) and splits
// the reduced elements over the block's 8 warps, combined in warp order (deterministic).
// Bandwidth (bench/exp_gpu_kernels, H200: columns 0.39, rows 0.23 of a copy): a kernel needs
// ~40 KB of loads in flight per SM, so every loop here issues kUnroll independent loads before
// it combines them (in the same order as one at a time: results unchanged), and contiguous float
// data moves as float4s: the column kernel gives each lane 4 neighbouring outputs when the rows
// are 16-byte aligned (outer % 4 == 0, row stride % 4 == 0), and contiguous rows of 33..4096
// elements take a warp each (float4s when inner % 4 == 0 and x is aligned): no block barrier per
// row, 8 rows per block. Both read each element once, the bytes the bench counts: ~0.9 of a
// copy is reachable; the column kernel's chunk partials add < 1% (row chunks of >= 256 rows).
// Why one kernel for a step's statistics: the sync-free step (parallel/deferred_stats.h) records
// each step's correct count and non-finite guard on the device; as argmax, eq, sum, mul, add and a
// copy that was six launches of a few threads' work in every step of a launch-bound model.
// Why a warp per softmax row: rows are class scores (tens to thousands of entries); a warp's
// shuffles give the max and the sum without shared memory or block barriers.
#include <echelon/cuda/kernels/reduce.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <echelon/cuda/launch.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, these included.
#include "arg_best.cuh"
#include "channels.cuh"

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

constexpr int kWarp = 32;
constexpr int kRowBlock = 256;
// Resident 256-thread blocks per SM asked of ptxas (__launch_bounds__, at most 40 registers) for
// the softmax, argmax and column kernels: 46-58 registers gave them 4-5 blocks; 6 fit without a
// spill, 8 would spill (tools/cuda-resources.py; a hypothesis for the GPU run).
[[maybe_unused]] constexpr int kMinBlocks = 6;  // used by __launch_bounds__ only
constexpr int kThreadPerRowLimit = 32;          // inner at or below this: one thread per row
constexpr int64_t kWarpPerRowLimit = 4096;      // contiguous rows up to this: one warp per row
constexpr int kUnroll = 4;                      // independent loads in flight per thread and step
constexpr int kVec = 4;                         // floats per 16-byte vector
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float reduce_identity(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max:
      return -INFINITY;
    case ReduceOp::Min:
      return INFINITY;
    default:
      return 0.0f;
  }
}

// Max/Min propagate NaN, as the CPU twin does.
__device__ __forceinline__ float combine(ReduceOp op, float acc, float v) {
  switch (op) {
    case ReduceOp::Max:
      return (v > acc || isnan(v)) && !isnan(acc) ? v : acc;
    case ReduceOp::Min:
      return (v < acc || isnan(v)) && !isnan(acc) ? v : acc;
    default:
      return acc + v;
  }
}

__device__ __forceinline__ float warp_combine(ReduceOp op, float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = combine(op, v, __shfl_down_sync(kFullMask, v, offset));
  return v;
}

// The block's combined value, valid in thread 0. blockDim.x == kRowBlock.
__device__ float block_combine(ReduceOp op, float v) {
  __shared__ float partial[kRowBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_combine(op, v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = threadIdx.x < kRowBlock / kWarp ? partial[threadIdx.x] : reduce_identity(op);
  if (warp == 0) v = warp_combine(op, v);
  __syncthreads();  // partial[] is reused by the next row
  return v;
}

__device__ __forceinline__ float finish(ReduceOp op, float acc, int64_t inner) {
  return op == ReduceOp::Mean ? acc / static_cast<float>(inner) : acc;
}

template <typename T>
__global__ void reduce_row_per_block_kernel(ReduceOp op, const T* x, StridedIndexer x_ix, T* out,
                                            int64_t outer, int64_t inner) {
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    float acc = reduce_identity(op);
    for (int64_t r = threadIdx.x; r < inner; r += blockDim.x)
      acc = combine(op, acc, x[strided_offset(x_ix, o * inner + r)]);
    acc = block_combine(op, acc);
    if (threadIdx.x == 0) out[o] = finish(op, acc, inner);
  }
}

template <typename T>
__global__ void reduce_row_per_thread_kernel(ReduceOp op, const T* x, StridedIndexer x_ix, T* out,
                                             int64_t outer, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < outer;
       o += step) {
    float acc = reduce_identity(op);
    for (int64_t r = 0; r < inner; ++r)
      acc = combine(op, acc, x[strided_offset(x_ix, o * inner + r)]);
    out[o] = finish(op, acc, inner);
  }
}

constexpr int kColumns = 32, kColumnRows = 8;  // the column kernel's block: (32, 8)
// The float4 column kernel spilled under kMinBlocks' 40 registers (tools/cuda-resources.py);
// 4 blocks (64 registers) still keep 4 x 256 x 4 x 16 B = 64 KB of loads in flight per SM.
[[maybe_unused]] constexpr int kMinVectorColumnBlocks = 4;
[[maybe_unused]] constexpr int kColumnBlock = kColumns * kColumnRows;

// Offset of element r of the reduced part: the common single-dim case needs no division.
__device__ __forceinline__ int64_t inner_offset(const StridedIndexer& ix, int64_t r) {
  return ix.rank == 1 ? r * ix.strides[0] : strided_offset(ix, r);
}

// W floats as one load (W = 4: a float4; channels.cuh's ChannelVec, lane_of), at float offset at.
template <int W>
using VecOf = typename ChannelVec<W>::type;
template <int W>
__device__ __forceinline__ VecOf<W> load_vec(const float* p, int64_t at) {
  return ChannelVec<W>::load(p + at, 0);
}

// out[o] = op over r of x[outer_ix(o) + inner_ix(r)]. Lane x owns the W outputs from
// o = (tile * 32 + x) * W (W = 4: outer % 4 == 0, outer_ix and inner_ix rank 1, the row stride
// % 4 == 0 and x aligned, so they are one float4 per row), warp y the reduced elements r = y,
// y + 8, ... of this block's row chunk (blockIdx.y), kUnroll rows' loads at a time; the 8
// partials are combined in warp order. With several row chunks (few outputs, many rows: a
// column sum over a large batch) each chunk's result goes to partial (chunks, outer) and
// reduce_column_chunks_kernel combines them in chunk order.
// kMasked (a linear layer's ReLU backward and bias gradient, relu_backward_column_sums): each
// element read is first x * (mask > 0) as the ReLU twin selects it (mask: the ReLU's output, laid
// out as x), written to `masked` (likewise), then summed: the same sums as the two ops, in one
// pass.
// The masked form holds a mask vector beside each load: it gets the vector form's register budget
// (at kMinBlocks' 40 registers the scalar one spilled).
template <typename T, int W, bool kMasked = false>
__global__ void __launch_bounds__(kColumnBlock,
                                  W == 1 && !kMasked ? kMinBlocks : kMinVectorColumnBlocks)
    reduce_columns_kernel(ReduceOp op, const T* x, StridedIndexer outer_ix, StridedIndexer inner_ix,
                          T* out, float* partial, int64_t outer, int64_t inner, int64_t chunk_rows,
                          const T* mask, T* masked) {
  static_assert(W == 1 || std::is_same_v<T, float>, "float4 loads read floats");
  __shared__ float shared[kColumnRows][kColumns * W + 1];
  const int64_t span = kColumns * W, tiles = (outer + span - 1) / span;
  const int64_t r_begin = blockIdx.y * chunk_rows, r_end = min(inner, r_begin + chunk_rows);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t o = tile * span + threadIdx.x * W;
    float acc[W];
#pragma unroll
    for (int l = 0; l < W; ++l) acc[l] = reduce_identity(op);
    if (o < outer) {
      const int64_t column_at = W == 1 ? strided_offset(outer_ix, o) : o;
      const T* column = x + column_at;
      for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kColumnRows * kUnroll) {
        VecOf<W> v[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (r + k * kColumnRows < r_end)
            v[k] = load_vec<W>(column, inner_offset(inner_ix, r + k * kColumnRows));
        if constexpr (kMasked) {
#pragma unroll
          for (int k = 0; k < kUnroll; ++k)
            if (r + k * kColumnRows < r_end) {
              const int64_t at = column_at + inner_offset(inner_ix, r + k * kColumnRows);
              const VecOf<W> m = load_vec<W>(mask, at);
#pragma unroll
              for (int l = 0; l < W; ++l)
                set_lane(v[k], l, lane_of(m, l) > 0.0f ? lane_of(v[k], l) : 0.0f);
              ChannelVec<W>::store(masked + at, 0, v[k]);
            }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; ++k)
          if (r + k * kColumnRows < r_end)
#pragma unroll
            for (int l = 0; l < W; ++l) acc[l] = combine(op, acc[l], lane_of(v[k], l));
      }
    }
#pragma unroll
    for (int l = 0; l < W; ++l) shared[threadIdx.y][threadIdx.x * W + l] = acc[l];
    __syncthreads();
    if (threadIdx.y == 0 && o < outer) {
#pragma unroll
      for (int l = 0; l < W; ++l) {
        float total = acc[l];
        for (int w = 1; w < kColumnRows; ++w)
          total = combine(op, total, shared[w][threadIdx.x * W + l]);
        if (partial)
          partial[blockIdx.y * outer + o + l] = total;
        else
          out[o + l] = finish(op, total, inner);
      }
    }
    __syncthreads();  // shared[] is reused by the next tile
  }
}

// One warp per contiguous row of 33..kWarpPerRowLimit elements (W = 4: inner % 4 == 0, x
// aligned): lane l reads units l, l + 32, ... kUnroll at a time, then a shuffle tree.
template <typename T, int W>
__global__ void __launch_bounds__(kRowBlock, kMinBlocks)
    reduce_row_per_warp_kernel(ReduceOp op, const T* x, T* out, int64_t outer, int64_t inner) {
  static_assert(W == 1 || std::is_same_v<T, float>, "float4 loads read floats");
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  const int64_t units = inner / W;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       o < outer; o += warps) {
    const T* row = x + o * inner;
    float acc = reduce_identity(op);
    for (int64_t u = lane; u < units; u += kWarp * kUnroll) {
      VecOf<W> v[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (u + k * kWarp < units) v[k] = load_vec<W>(row, (u + k * kWarp) * W);
#pragma unroll
      for (int k = 0; k < kUnroll; ++k)
        if (u + k * kWarp < units)
#pragma unroll
          for (int l = 0; l < W; ++l) acc = combine(op, acc, lane_of(v[k], l));
    }
    acc = warp_combine(op, acc);
    if (lane == 0) out[o] = finish(op, acc, inner);
  }
}

// out[o] = the chunks' partial (chunks, outer) results for o, combined in chunk order.
template <typename T>
__global__ void reduce_column_chunks_kernel(ReduceOp op, const float* partial, int64_t chunks,
                                            T* out, int64_t outer, int64_t inner) {
  constexpr int kBatch = 8;  // loads in flight before they are combined in chunk order
  for (int64_t o = grid_start(); o < outer; o += grid_step()) {
    float acc = partial[o];
    for (int64_t k = 1; k < chunks; k += kBatch) {
      float v[kBatch] ECH_SIM_ZEROED;
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (k + b < chunks) v[b] = partial[(k + b) * outer + o];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (k + b < chunks) acc = combine(op, acc, v[b]);
    }
    out[o] = finish(op, acc, inner);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock, kMinBlocks)
    argmax_kernel(const T* x, StridedIndexer x_ix, int64_t* out, int64_t outer, int64_t inner) {
  __shared__ ArgBest partial[kRowBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {
    // INT64_MAX: an idle thread's candidate loses every tie against a real element.
    ArgBest best{-INFINITY, INT64_MAX};
    for (int64_t r = threadIdx.x; r < inner; r += blockDim.x)
      best = better(best, ArgBest{x[strided_offset(x_ix, o * inner + r)], r});
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const ArgBest other{__shfl_down_sync(kFullMask, best.value, offset),
                          __shfl_down_sync(kFullMask, best.index, offset)};
      best = better(best, other);
    }
    if (lane == 0) partial[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kRowBlock / kWarp; ++w) best = better(best, partial[w]);
      out[o] = best.index;
    }
    __syncthreads();
  }
}

// One block: warp w takes rows w, w + 8, ...; a row's argmax as argmax_kernel's (better() picks
// the same element in any order), lane 0 counts a hit; the counts are added exactly (integers),
// and thread 0 writes *correct and *guard += 0 * *loss.
__global__ void __launch_bounds__(kRowBlock)
    step_statistics_kernel(const float* logits, const int64_t* targets, int64_t n, int64_t classes,
                           const float* loss, float* guard, float* correct) {
  __shared__ int64_t warp_hits[kRowBlock / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int64_t hits = 0;
  for (int64_t row = warp; row < n; row += kRowBlock / kWarp) {
    ArgBest best{-INFINITY, INT64_MAX};
    for (int64_t c = lane; c < classes; c += kWarp)
      best = better(best, ArgBest{logits[row * classes + c], c});
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const ArgBest other{__shfl_down_sync(kFullMask, best.value, offset),
                          __shfl_down_sync(kFullMask, best.index, offset)};
      best = better(best, other);
    }
    if (lane == 0 && best.index == targets[row]) ++hits;
  }
  if (lane == 0) warp_hits[warp] = hits;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kRowBlock / kWarp; ++w) hits += warp_hits[w];
    *correct = static_cast<float>(hits);
    *guard = *guard + 0.0f * *loss;
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

enum class SoftmaxKind { Softmax, LogSoftmax };

// One warp per (outer, inner) row; element d of the row is at base + d * inner.
template <typename T, SoftmaxKind kind>
__global__ void __launch_bounds__(kRowBlock, kMinBlocks)
    softmax_forward_kernel(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner) {
  const int lane = threadIdx.x % kWarp;
  const int64_t rows = outer * inner;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < rows; row += warps) {
    const int64_t base = (row / inner) * dim_size * inner + row % inner;
    float max_value = -INFINITY;
    for (int64_t d = lane; d < dim_size; d += kWarp)
      max_value = fmaxf(max_value, x[base + d * inner]);
    max_value = warp_max(max_value);
    float sum = 0.0f;
    for (int64_t d = lane; d < dim_size; d += kWarp) sum += expf(x[base + d * inner] - max_value);
    sum = warp_sum(sum);
    const float log_sum = logf(sum);
    for (int64_t d = lane; d < dim_size; d += kWarp) {
      const float shifted = x[base + d * inner] - max_value;
      y[base + d * inner] = kind == SoftmaxKind::Softmax ? expf(shifted) / sum : shifted - log_sum;
    }
  }
}

template <typename T, SoftmaxKind kind>
__global__ void __launch_bounds__(kRowBlock, kMinBlocks)
    softmax_backward_kernel(const T* grad_out, const T* y, T* grad_in, int64_t outer,
                            int64_t dim_size, int64_t inner) {
  const int lane = threadIdx.x % kWarp;
  const int64_t rows = outer * inner;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
       row < rows; row += warps) {
    const int64_t base = (row / inner) * dim_size * inner + row % inner;
    // Softmax: sum(g * y); log-softmax: sum(g).
    float total = 0.0f;
    for (int64_t d = lane; d < dim_size; d += kWarp) {
      const int64_t i = base + d * inner;
      total += kind == SoftmaxKind::Softmax ? grad_out[i] * y[i] : grad_out[i];
    }
    total = warp_sum(total);
    for (int64_t d = lane; d < dim_size; d += kWarp) {
      const int64_t i = base + d * inner;
      grad_in[i] = kind == SoftmaxKind::Softmax ? y[i] * (grad_out[i] - total)
                                                : grad_out[i] - expf(y[i]) * total;
    }
  }
}

unsigned grid_for_rows(int64_t rows, int64_t rows_per_block) {
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  const int64_t cap = max_grid_blocks();
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

template <typename T, SoftmaxKind kind>
void launch_softmax_forward(const char* op, const T* x, T* y, int64_t outer, int64_t dim_size,
                            int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0 || dim_size == 0) return;
  ECH_LAUNCH(grid_for_rows(outer * inner, kRowBlock / kWarp), kRowBlock, 0, stream,
             softmax_forward_kernel<T, kind>)
  (x, y, outer, dim_size, inner);
  ECH_CUDA_CHECK_LAUNCH(op);
}

template <typename T, SoftmaxKind kind>
void launch_softmax_backward(const char* op, const T* grad_out, const T* y, T* grad_in,
                             int64_t outer, int64_t dim_size, int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0 || dim_size == 0) return;
  ECH_LAUNCH(grid_for_rows(outer * inner, kRowBlock / kWarp), kRowBlock, 0, stream,
             softmax_backward_kernel<T, kind>)
  (grad_out, y, grad_in, outer, dim_size, inner);
  ECH_CUDA_CHECK_LAUNCH(op);
}

// The column layout: x_ix splits into outer dims [0, k) and reduced dims [k, rank) (no dim
// merged across the split), the last outer dim is contiguous and the last reduced one is not.
bool split_columns(const StridedIndexer& ix, int64_t outer, StridedIndexer& outer_ix,
                   StridedIndexer& inner_ix) {
  int64_t product = 1;
  int k = 0;
  while (k < ix.rank && product < outer) product *= ix.sizes[k++];
  if (product != outer || k == 0 || k == ix.rank) return false;
  if (ix.strides[k - 1] != 1 || ix.strides[ix.rank - 1] == 1) return false;
  outer_ix = StridedIndexer{};
  inner_ix = StridedIndexer{};
  outer_ix.rank = k;
  inner_ix.rank = ix.rank - k;
  for (int d = 0; d < ix.rank; ++d) {
    StridedIndexer& part = d < k ? outer_ix : inner_ix;
    const int j = d < k ? d : d - k;
    part.sizes[j] = ix.sizes[d];
    part.strides[j] = ix.strides[d];
  }
  return true;
}

#if ECHELON_CUDA_SIM
constexpr int64_t kColumnTargetBlocks = 4, kMinChunkRows = 16;  // tests reach both paths
#else
constexpr int64_t kColumnTargetBlocks = 8 * 132, kMinChunkRows = 256;  // ~8 blocks per SM
#endif

// mask, masked (null: a plain reduction): see reduce_columns_kernel's kMasked; laid out as x.
template <typename T>
void reduce_columns(ReduceOp op, const T* x, const StridedIndexer& outer_ix,
                    const StridedIndexer& inner_ix, T* out, int64_t outer, int64_t inner,
                    cudaStream_t stream, const T* mask = nullptr, T* masked = nullptr) {
  const auto aligned = [](const T* p) {
    return reinterpret_cast<uintptr_t>(p) % (kVec * sizeof(float)) == 0;
  };
  const bool vec = std::is_same_v<T, float> && outer % kVec == 0 && outer_ix.rank == 1 &&
                   inner_ix.rank == 1 && inner_ix.strides[0] % kVec == 0 && aligned(x) &&
                   (!mask || (aligned(mask) && aligned(masked)));
  const int64_t span = vec ? kColumns * kVec : kColumns;
  const int64_t tiles = (outer + span - 1) / span;
  // Row chunks: enough blocks to fill the GPU when there are few outputs; one otherwise.
  const int64_t want = (kColumnTargetBlocks + tiles - 1) / tiles;
  const int64_t chunks = std::clamp<int64_t>(
      want, 1, std::min<int64_t>(std::max<int64_t>(inner / kMinChunkRows, 1), 65535));
  const int64_t chunk_rows = (inner + chunks - 1) / chunks;
  const dim3 grid(grid_for_rows(outer, span), static_cast<unsigned>(chunks));
  const dim3 block(kColumns, kColumnRows);
  const auto kernel =
      mask ? (vec ? reduce_columns_kernel<T, kVec, true> : reduce_columns_kernel<T, 1, true>)
           : (vec ? reduce_columns_kernel<T, kVec> : reduce_columns_kernel<T, 1>);
  if (chunks == 1) {
    ECH_LAUNCH(grid, block, 0, stream, kernel)
    (op, x, outer_ix, inner_ix, out, nullptr, outer, inner, chunk_rows, mask, masked);
    return;
  }
  Scratch partial(static_cast<size_t>(chunks * outer) * sizeof(float), stream);
  ECH_LAUNCH(grid, block, 0, stream, kernel)
  (op, x, outer_ix, inner_ix, out, partial.as<float>(), outer, inner, chunk_rows, mask, masked);
  ECH_CUDA_CHECK_LAUNCH("reduce (column chunks)");
  launch_1d("reduce (combine column chunks)", outer, stream, reduce_column_chunks_kernel<T>, op,
            partial.as<const float>(), chunks, out, outer, inner);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void reduce(ReduceOp op, const T* x, StridedIndexer x_ix, T* out, int64_t outer, int64_t inner,
            cudaStream_t stream) {
  if (outer <= 0) return;
  ECH_CHECK(inner >= 1, "reduce: cannot reduce an empty dimension (", outer, " rows of ", inner,
            " elements)");
  StridedIndexer outer_ix, inner_ix;
  if (split_columns(x_ix, outer, outer_ix, inner_ix)) {
    reduce_columns(op, x, outer_ix, inner_ix, out, outer, inner, stream);
  } else if (inner > kThreadPerRowLimit && inner <= kWarpPerRowLimit &&
             (x_ix.rank == 0 || (x_ix.rank == 1 && x_ix.strides[0] == 1))) {
    const bool vec = std::is_same_v<T, float> && inner % kVec == 0 &&
                     reinterpret_cast<uintptr_t>(x) % (kVec * sizeof(float)) == 0;
    const auto kernel =
        vec ? reduce_row_per_warp_kernel<T, kVec> : reduce_row_per_warp_kernel<T, 1>;
    ECH_LAUNCH(grid_for_rows(outer, kRowBlock / kWarp), kRowBlock, 0, stream, kernel)
    (op, x, out, outer, inner);
  } else if (inner <= kThreadPerRowLimit) {
    ECH_LAUNCH(grid_for_rows(outer, kRowBlock), kRowBlock, 0, stream,
               reduce_row_per_thread_kernel<T>)
    (op, x, x_ix, out, outer, inner);
  } else {
    ECH_LAUNCH(grid_for_rows(outer, 1), kRowBlock, 0, stream, reduce_row_per_block_kernel<T>)
    (op, x, x_ix, out, outer, inner);
  }
  ECH_CUDA_CHECK_LAUNCH("reduce");
}

template <typename T>
void argmax(const T* x, StridedIndexer x_ix, int64_t* out, int64_t outer, int64_t inner,
            cudaStream_t stream) {
  if (outer <= 0) return;
  ECH_CHECK(inner >= 1, "argmax: cannot take the argmax of an empty dimension (", outer,
            " rows of ", inner, " elements)");
  ECH_LAUNCH(grid_for_rows(outer, 1), kRowBlock, 0, stream, argmax_kernel<T>)
  (x, x_ix, out, outer, inner);
  ECH_CUDA_CHECK_LAUNCH("argmax");
}

void relu_backward_column_sums(const float* grad_out, const float* relu_out, float* masked,
                               float* column_sums, int64_t rows, int64_t columns,
                               cudaStream_t stream) {
  if (columns <= 0) return;
  if (rows <= 0) {  // an empty sum is 0
    ECH_CUDA_CHECK(
        cudaMemsetAsync(column_sums, 0, static_cast<size_t>(columns) * sizeof(float), stream));
    return;
  }
  StridedIndexer across,
      down;  // (rows, columns) contiguous: columns adjacent, rows `columns` apart
  across.rank = down.rank = 1;
  across.sizes[0] = columns, across.strides[0] = 1;
  down.sizes[0] = rows, down.strides[0] = columns;
  reduce_columns(ReduceOp::Sum, grad_out, across, down, column_sums, columns, rows, stream,
                 relu_out, masked);
  ECH_CUDA_CHECK_LAUNCH("relu_backward_column_sums");
}

void step_statistics(const float* logits, const int64_t* targets, int64_t n, int64_t classes,
                     const float* loss, float* guard, float* correct, cudaStream_t stream) {
  ECH_CHECK(classes >= 1, "step_statistics: logits (", n, ", ", classes, ") have no class");
  ECH_LAUNCH(1, kRowBlock, 0, stream, step_statistics_kernel)
  (logits, targets, n, classes, loss, guard, correct);
  ECH_CUDA_CHECK_LAUNCH("step_statistics");
}

template <typename T>
void softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner,
             cudaStream_t stream) {
  launch_softmax_forward<T, SoftmaxKind::Softmax>("softmax", x, y, outer, dim_size, inner, stream);
}

template <typename T>
void log_softmax(const T* x, T* y, int64_t outer, int64_t dim_size, int64_t inner,
                 cudaStream_t stream) {
  launch_softmax_forward<T, SoftmaxKind::LogSoftmax>("log_softmax", x, y, outer, dim_size, inner,
                                                     stream);
}

template <typename T>
void softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer, int64_t dim_size,
                      int64_t inner, cudaStream_t stream) {
  launch_softmax_backward<T, SoftmaxKind::Softmax>("softmax_backward", grad_out, y, grad_in, outer,
                                                   dim_size, inner, stream);
}

template <typename T>
void log_softmax_backward(const T* grad_out, const T* y, T* grad_in, int64_t outer,
                          int64_t dim_size, int64_t inner, cudaStream_t stream) {
  launch_softmax_backward<T, SoftmaxKind::LogSoftmax>("log_softmax_backward", grad_out, y, grad_in,
                                                      outer, dim_size, inner, stream);
}

template void reduce<float>(ReduceOp, const float*, StridedIndexer, float*, int64_t, int64_t,
                            cudaStream_t);
template void argmax<float>(const float*, StridedIndexer, int64_t*, int64_t, int64_t, cudaStream_t);
template void softmax<float>(const float*, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void log_softmax<float>(const float*, float*, int64_t, int64_t, int64_t, cudaStream_t);
template void softmax_backward<float>(const float*, const float*, float*, int64_t, int64_t, int64_t,
                                      cudaStream_t);
template void log_softmax_backward<float>(const float*, const float*, float*, int64_t, int64_t,
                                          int64_t, cudaStream_t);

}  // namespace echelon::cuda
