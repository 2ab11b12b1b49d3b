// The weight gradient by direct reduction (conv_direct.h), for filters too small for a GEMM tile.
// Why: as a GEMM, grad_w (O, R) = grad_out (O, N*L) x cols^T (N*L, R) with R = C*KH*KW; LeNet-5's
// conv1 is 6 x 25 on a 16x256 tile, 4% of its multiply-adds useful, and the H200 took 88 us for
// its 15 M multiply-adds (bench/RESULTS.md, session 23, call 3), 30% of the whole LeNet-5 step
// with conv2's 42 us. Here no multiply-add is wasted beyond rounding O up to 8, and every operand
// is read from global memory once per chunk, then from shared memory:
// - a chunk is one image and a band of output rows; a block stages its grad_out rows (all O) and
//   the x rows they see (all C, zero in the padding) in shared memory, then reduces over them;
//   a block takes a contiguous range of chunks and keeps its sums in registers across them;
// - a work item is (8 output channels, input channel c, kernel row ki): 8 x KW accumulators, and
//   per output position 8 + KW shared loads for 8 x KW multiply-adds;
// - `splits` adjacent lanes (a power of two) share a work item and walk every splits-th position
//   of the band; a shuffle tree adds them in a fixed order; the blocks' partial gradients are
//   added in block order by sum_groups (sum_groups.cu). Deterministic for a given block count;
// - with the bias gradient wanted under fp32 (LeNet-5's layers; VGG-16's first), `strands`
//   threads per output channel also sum the staged band's grad_out (exact under fp32; under
//   TF32 / bf16 it holds rounded values, and conv.cu's bias kernels run instead), and the
//   block's O sums travel with its partial weights through sum_groups: the bias costs no launch
//   of its own (it was two: conv.cu's chunks and finish).
// Under TF32 / bf16 the operands are rounded as they are staged, as mma_tile.cuh's fragments
// round them, and multiplied in fp32 (exact for TF32 / bf16 values). CPU twin: the naive
// convolution's weight gradient in tensor/cpu/conv.cpp (on rounded inputs under TF32 / bf16);
// tests/gpu/conv_gpu_test.cpp and conv_tune_gpu_test.cpp compare it with the twin and with the
// implicit GEMM.
#include <echelon/cuda/kernels/conv_direct.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <type_traits>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/switches.h>
#include <echelon/kernels/fast_div.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "channels.cuh"
#include "staged_rounding.cuh"

namespace echelon::cuda {
namespace {

constexpr int kOutPerItem = 8;  // output channels per work item: two float4s of the staged band
constexpr int kQuad = 4;        // positions of a row the quad walk takes at once
constexpr int kQuadSplits = 2;  // the most lanes per item that take the quad walk
constexpr int kMaxThreads = 256;
// Work items up to 8 blocks' worth (ResNet's 64-channel 3x3 layers: 8 x 64 x 3 = 1536): each
// block of a chunk range stages the whole band, so more item groups would multiply that work.
constexpr int kMaxItemGroups = 8;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kBandBytes = size_t{32} << 10;  // under the 48 KiB that needs no opt-in
// A block stages a chunk, waits, then reduces it: latency-bound on small problems (LeNet-5's
// conv1: ~9 positions a thread per chunk), so more blocks rather than more chunks per block.
#if ECHELON_CUDA_SIM
// Test-sized problems then get several bands, several blocks and several chunks per block.
constexpr int64_t kDirectBlocks = 3;
#else
constexpr int64_t kDirectBlocks = 2 * 132;  // two blocks per SM of an H200
#endif

// A thread's walk over elements tid, tid + threads, ... of rows `width` wide, in row-major order:
// (row, col) stepped without a division.
struct GridWalk {
  FastDiv by_width;
  int rows_step = 0, cols_step = 0;  // threads / width, threads % width

  GridWalk() = default;
  GridWalk(int width, int threads)
      : by_width(width), rows_step(threads / width), cols_step(threads % width) {}
#if defined(__CUDACC__) || ECHELON_CUDA_SIM
  __device__ void start(int tid, int& row, int& col) const {
    by_width.divmod(tid, row, col);
  }
  __device__ void next(int& row, int& col) const {
    row += rows_step, col += cols_step;
    if (col >= by_width.divisor()) col -= by_width.divisor(), ++row;
  }
#endif
};

// Everything the kernel needs, in 32 bits (conv_gemm_fits bounds every operand below 2^31).
struct DirectPlan {
  int c, h, w, o, out_h, out_w, kernel_h, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int all_items;    // ceil(O / kOutPerItem) * C * KH
  int item_groups;  // blockIdx.y takes items [y * items, (y + 1) * items)
  int items;        // work items per block: all_items over item_groups, <= kMaxThreads
  int splits;       // lanes per work item, a power of two <= 32
  int threads;      // items * splits rounded up to a warp
  int rows;         // output rows per band
  int bands;        // ceil(OH / rows)
  int chunks;       // N * bands
  int per_block;    // chunks per block
  int blocks;
  int out_pad;       // O rounded up to kOutPerItem: zero rows in the staged grad_out
  int x_rows;        // input rows a band reads: (rows - 1) * sh + (KH - 1) * dh + 1
  int x_width;       // input columns it reads: (g_width - 1) * sw + (KW - 1) * dw + 1
  int x_pitch;       // x_band's row stride and
  int x_plane;       // channel stride (x_layout_of: padded against bank conflicts)
  int g_width;       // staged grad_out columns: OW, or for the quad walk OW rounded up to 4
  bool quads;        // the quad walk (see the kernel)
  int bias_strands;  // threads per output channel summing the bias gradient; 0: none wanted
  Rounding rounding;
  // stage_band's walks over the staged rows and its splits of their row indices.
  GridWalk g_walk, x_walk;     // over out_pad * rows rows of g_width, C * x_rows rows of x_width
  FastDiv by_rows, by_x_rows;  // a g_walk row into (o, r), an x_walk row into (c, i)

  __host__ __device__ int g_plane() const { return rows * g_width; }  // an output channel's band
  size_t shared_bytes() const {
    const size_t band = static_cast<size_t>(out_pad) * g_plane() + static_cast<size_t>(c) * x_plane;
    // The bias strands' sums reuse it at the end.
    return std::max(band, bias_strands > 0 ? static_cast<size_t>(threads) : 0) * sizeof(float);
  }
};

#if defined(__CUDACC__) || ECHELON_CUDA_SIM
// Stages chunk (image n, output rows [oh0, oh0 + rows)) in shared memory, R: p.rounding:
// g_band (out_pad / 8, p.rows * g_width, 8) = grad_out's rows, a work item's 8 output channels side
// by side at each position (two 16-byte loads), zero past O, past OW and past the band's last row;
// x_band (C, x_rows, x_width) with strides (x_plane, x_pitch) = x from row oh0 * sh - ph and
// column -pw, zero outside the image.
// Each thread takes every p.threads-th element of each, in grad_out's and x's order (a row's
// columns on neighbouring threads: coalesced loads). Until session 44 a warp staged a row at a
// time, a lane a column, through two divisions and 64-bit offsets: ResNet's 8- to 34-float rows
// left most lanes idle, and staging cost about as much as the reduction (32x32 layers) or several
// times it (8x8).
template <Rounding R>
__device__ void stage_band(const DirectPlan& p, int n, int oh0, int rows,
                           const float* __restrict__ grad_out, const float* __restrict__ x,
                           float* g_band, float* x_band) {
  const int tid = static_cast<int>(threadIdx.x);
  int g_row, col;  // g_row = (o, r): grad_out row oh0 + r of channel o
  p.g_walk.start(tid, g_row, col);
  for (; g_row < p.out_pad * p.rows; p.g_walk.next(g_row, col)) {
    int o, r;
    p.by_rows.divmod(g_row, o, r);
    // In 32 bits: an element of grad_out (conv_gemm_fits).
    const bool inside = o < p.o && r < rows && col < p.out_w;
    const float v =
        inside ? staged(grad_out[((n * p.o + o) * p.out_h + oh0 + r) * p.out_w + col], R) : 0.0f;
    const unsigned item = static_cast<unsigned>(o) / kOutPerItem;  // unsigned: a shift, a mask
    const unsigned lane = static_cast<unsigned>(o) % kOutPerItem;
    g_band[((item * p.rows + r) * p.g_width + col) * kOutPerItem + lane] = v;
  }
  int x_row, j;  // x_row = (c, i): x row oh0 * sh - ph + i of channel c, column j - pw
  p.x_walk.start(tid, x_row, j);
  for (; x_row < p.c * p.x_rows; p.x_walk.next(x_row, j)) {
    int c, i;
    p.by_x_rows.divmod(x_row, c, i);
    const int ih = oh0 * p.stride_h - p.pad_h + i, iw = j - p.pad_w;
    // 0 <= ih < h and 0 <= iw < w as unsigned compares.
    const bool inside = static_cast<unsigned>(ih) < static_cast<unsigned>(p.h) &&
                        static_cast<unsigned>(iw) < static_cast<unsigned>(p.w);
    x_band[c * p.x_plane + i * p.x_pitch + j] =
        inside ? staged(x[((n * p.c + c) * p.h + ih) * p.w + iw], R) : 0.0f;
  }
}

// acc += every strands-th staged grad_out value of this thread's output channel in the band:
// thread t is strand t / O of channel t % O (neighbouring threads, neighbouring channels of a
// position: few bank conflicts in g_band's [item][position][8] layout).
__device__ void sum_band_bias(const DirectPlan& p, int rows, const float* g_band, float& acc) {
  const int o = threadIdx.x % p.o, strand = threadIdx.x / p.o;
  if (strand >= p.bias_strands) return;
  const float* const staged =
      g_band + o / kOutPerItem * p.g_plane() * kOutPerItem + o % kOutPerItem;
#pragma unroll 4
  for (int q = strand; q < rows * p.g_width; q += p.bias_strands) acc += staged[q * kOutPerItem];
}

// Block (b, y) sums chunks [b * per_block, ...) for item group y into out + b * block_stride
// (grad_w's layout) and, with bias strands, grad_out's channel sums into out_bias + b *
// block_stride (O). Register bounds: three blocks per SM (80 registers) for KW = 3, two for 5 and
// 7 (the heuristic's 264 blocks are two per SM anyway); left free, ptxas gave the 3x3 kernel 64
// registers and spilled once it took item groups, and at 80 the 5x5 one spilled 4 bytes.
template <int KW>
__global__ void __launch_bounds__(kMaxThreads, KW == 3 ? 3 : 2)
    wgrad_direct_kernel(DirectPlan p, const float* __restrict__ grad_out,
                        const float* __restrict__ x, float* __restrict__ out,
                        float* __restrict__ out_bias, int64_t block_stride) {
  ECH_DYNAMIC_SHARED(float, smem);  // p.shared_bytes()
  float* const g_band = smem;
  float* const x_band = smem + p.out_pad * p.g_plane();
  const int local = threadIdx.x / p.splits, split = threadIdx.x % p.splits;
  const int item = static_cast<int>(blockIdx.y) * p.items + local;
  const bool active = local < p.items && item < p.all_items;
  const int ki = item % p.kernel_h, c = item / p.kernel_h % p.c;
  const int ob = item / (p.kernel_h * p.c);
  const float4* const g_item = reinterpret_cast<const float4*>(g_band) + ob * 2 * p.g_plane();
  const float* const x_item = x_band + c * p.x_plane + ki * p.dilation_h * p.x_pitch;
  // From (band row r, column OW) to (r + 1, 0) in x_band: sh rows down, OW * sw columns back.
  const int row_carry = p.stride_h * p.x_pitch - p.out_w * p.stride_w;
  float acc[kOutPerItem][KW] = {};
  float bias_acc = 0.0f;
  const int first = static_cast<int>(blockIdx.x) * p.per_block;
  const int last = min(first + p.per_block, p.chunks);
  for (int chunk = first; chunk < last; ++chunk) {
    const int n = chunk / p.bands, oh0 = chunk % p.bands * p.rows;
    const int rows = min(p.rows, p.out_h - oh0);
    __syncthreads();  // every thread is done with the previous chunk's band
    with_rounding(p.rounding, [&](auto r) {
      stage_band<decltype(r)::value>(p, n, oh0, rows, grad_out, x, g_band, x_band);
    });
    __syncthreads();
    if (p.bias_strands > 0) sum_band_bias(p, rows, g_band, bias_acc);
    if (!active) continue;
    // Positions q = split, split + splits, ... of the band's rows * OW, as (row, col) and their
    // addresses in g_band and x_band, stepped without a division. Loop-invariant values in
    // registers, and the 8 grad_out values as two float4s: the first version's loop spent 35
    // integer instructions a position on addresses (sm_90 SASS, tools/sass-loops.py).
    const int positions = rows * p.out_w, out_w = p.out_w, splits = p.splits;
    const int x_step = splits * p.stride_w, dilation_w = p.dilation_w;
    int col = split % out_w;
    const float* xq = x_item + split / out_w * p.stride_h * p.x_pitch + col * p.stride_w;
    const float4* gq = g_item + 2 * split;
    const auto walk = [&](auto unit_dilation) {
      for (int q = split; q < positions; q += splits, gq += 2 * splits) {
        const float4 lo = gq[0], hi = gq[1];
        const float g[kOutPerItem] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        float v[KW];
#pragma unroll
        for (int j = 0; j < KW; ++j) {
          if constexpr (decltype(unit_dilation)::value)
            v[j] = xq[j];
          else
            v[j] = xq[j * dilation_w];
        }
#pragma unroll
        for (int k = 0; k < kOutPerItem; ++k)
#pragma unroll
          for (int j = 0; j < KW; ++j) acc[k][j] = fmaf(g[k], v[j], acc[k][j]);
        col += splits;
        xq += x_step;
        while (col >= out_w) {
          col -= out_w;
          xq += row_carry;
        }
      }
    };
    // The quad walk (stride and dilation 1 along rows, few splits): quads Q = split, split +
    // splits, ... of 4 neighbouring positions of one row (g_width is a multiple of 4, zeros past
    // OW). The KW + 3 values of x they see are loaded once, then each position's 8 grad_out
    // values feed 8 x KW multiply-adds: per 4 positions 8 + KW + 3 shared loads and one step of
    // the walk, where the position walk takes 4 x (2 + KW) loads and 4 steps. With many splits
    // the lanes of an item would read quads 128 bytes apart, one bank group: not taken there.
    const auto walk_quads = [&] {
      const int row_quads = p.g_width / kQuad, quads = rows * row_quads;
      const int quad_carry = p.stride_h * p.x_pitch - p.g_width;
      int qc = split % row_quads;
      const float* xq = x_item + split / row_quads * p.stride_h * p.x_pitch + qc * kQuad;
      const float4* gq = g_item + 2 * kQuad * split;
      for (int quad = split; quad < quads; quad += splits, gq += 2 * kQuad * splits) {
        float v[kQuad + KW - 1];
#pragma unroll
        for (int j = 0; j < kQuad + KW - 1; ++j) v[j] = xq[j];
#pragma unroll
        for (int px = 0; px < kQuad; ++px) {
          const float4 lo = gq[2 * px], hi = gq[2 * px + 1];
          const float g[kOutPerItem] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int k = 0; k < kOutPerItem; ++k)
#pragma unroll
            for (int j = 0; j < KW; ++j) acc[k][j] = fmaf(g[k], v[px + j], acc[k][j]);
        }
        qc += splits;
        xq += kQuad * splits;
        while (qc >= row_quads) {
          qc -= row_quads;
          xq += quad_carry;
        }
      }
    };
    if (p.quads)
      walk_quads();
    else if (dilation_w == 1)
      walk(std::true_type{});
    else
      walk(std::false_type{});
  }
  // Every lane takes part (inactive ones hold zeros): a split group is `splits` aligned lanes.
#pragma unroll
  for (int k = 0; k < kOutPerItem; ++k)
#pragma unroll
    for (int j = 0; j < KW; ++j)
      for (int offset = p.splits / 2; offset > 0; offset /= 2)
        acc[k][j] += __shfl_down_sync(kFullMask, acc[k][j], offset);
  if (active && split == 0) {
    float* const block_out = out + blockIdx.x * block_stride;
#pragma unroll
    for (int k = 0; k < kOutPerItem; ++k) {
      const int o = ob * kOutPerItem + k;
      if (o >= p.o) break;
#pragma unroll
      for (int j = 0; j < KW; ++j)
        block_out[((o * p.c + c) * p.kernel_h + ki) * KW + j] = acc[k][j];
    }
  }
  // Last, when the weights' accumulators are free: every thread gets here.
  if (p.bias_strands > 0) {
    __syncthreads();  // the last band is read: its shared memory takes the strands' sums
    smem[threadIdx.x] = bias_acc;
    __syncthreads();
    if (static_cast<int>(threadIdx.x) < p.o) {
      float total = 0.0f;
      for (int strand = 0; strand < p.bias_strands; ++strand)
        total += smem[strand * p.o + threadIdx.x];
      out_bias[blockIdx.x * block_stride + threadIdx.x] = total;
    }
  }
}
#endif

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t items_of(const Conv2dGeometry& a) {
  return ceil_div(a.o, kOutPerItem) * a.c * a.kernel_h;
}

// Blocks along y, each a share of the work items: at most kMaxThreads items a block.
int64_t item_groups_of(const Conv2dGeometry& a) {
  return ceil_div(items_of(a), kMaxThreads);
}

// The blocks along x (groups of chunks) that, with the item groups, reach kDirectBlocks.
int64_t wanted_groups(const Conv2dGeometry& a) {
  return ceil_div(kDirectBlocks, item_groups_of(a));
}

int64_t items_per_block(const Conv2dGeometry& a) {
  return ceil_div(items_of(a), item_groups_of(a));
}

// Lanes per work item: a power of two, as many as fit the block's threads, at most a warp.
int64_t splits_of(const Conv2dGeometry& a) {
  int64_t splits = 1;
  while (splits < kWarp && items_per_block(a) * splits * 2 <= kMaxThreads) splits *= 2;
  return splits;
}

bool quad_walk(const Conv2dGeometry& a) {
  return a.stride_w == 1 && a.dilation_w == 1 && splits_of(a) <= kQuadSplits;
}

// Staged columns: grad_out's (OW, rounded up to 4 for the quad walk), and the x columns they see.
int64_t g_width_of(const Conv2dGeometry& a) {
  return quad_walk(a) ? ceil_div(a.out_w, kQuad) * kQuad : a.out_w;
}
int64_t x_width_of(const Conv2dGeometry& a) {
  return (g_width_of(a) - 1) * a.stride_w + (a.kernel_w - 1) * a.dilation_w + 1;
}

int64_t x_rows_of(const Conv2dGeometry& a, int64_t rows) {
  return (rows - 1) * a.stride_h + (a.kernel_h - 1) * a.dilation_h + 1;
}

// x_band's strides. With one or two lanes an item (splits), the lanes of a warp take neighbouring
// work items (c, ki), ki fastest, and at each step read x_band at c * plane + ki * dh * pitch +
// (their split's offset): with plane = KH * dh * pitch (mod 32 banks), item t reads bank t * dh *
// pitch + offset, 32 different banks when dh * pitch is odd and splits is 1. With more splits a
// warp holds few items and the splits' offsets decide (LeNet-5's layers, the 3-channel first
// ones): left dense, where the padding did not help. Unpadded, ResNet-20's 16-, 32- and 64-channel
// layers put 6 lanes on a bank (x's bands of 34, 18 and 10 columns, 8 rows), so each of the quad
// walk's KW + 3 x loads took about 6 shared-memory wavefronts (wgrad_direct_x_load_wavefronts;
// bench/RESULTS.md, session 45). The values and their order are unchanged; only where they sit.
struct XLayout {
  int64_t pitch, plane;
};
constexpr int64_t kBanks = 32;
XLayout x_layout_of(const Conv2dGeometry& a, int64_t rows, bool padded = true) {
  if (!padded || splits_of(a) > kQuadSplits)
    return {x_width_of(a), x_rows_of(a, rows) * x_width_of(a)};
  const int64_t pitch = x_width_of(a) | 1;
  const int64_t unpadded = x_rows_of(a, rows) * pitch;
  const int64_t want = a.kernel_h * a.dilation_h * pitch % kBanks;
  return {pitch, unpadded + ((want - unpadded) % kBanks + kBanks) % kBanks};
}

size_t band_bytes(const Conv2dGeometry& a, int64_t rows) {
  const int64_t floats = ceil_div(a.o, kOutPerItem) * kOutPerItem * rows * g_width_of(a) +
                         a.c * x_layout_of(a, rows).plane;
  return static_cast<size_t>(floats) * sizeof(float);
}

// Rows per band: enough bands for wanted_groups chunks over the images, as many rows as fit.
int64_t band_rows(const Conv2dGeometry& a) {
  const int64_t wanted = ceil_div(a.out_h, std::max<int64_t>(ceil_div(wanted_groups(a), a.n), 1));
  int64_t rows = std::max<int64_t>(std::min(wanted, a.out_h), 1);
  while (rows > 1 && band_bytes(a, rows) > kBandBytes) --rows;
  return rows;
}

int64_t chunks_of(const Conv2dGeometry& a) {
  return a.n * ceil_div(a.out_h, band_rows(a));
}

DirectPlan plan_for(const Conv2dGeometry& a, int64_t groups, bool bias) {
  DirectPlan p{};
  const auto narrow = [](int64_t v) { return static_cast<int>(v); };
  p.c = narrow(a.c), p.h = narrow(a.h), p.w = narrow(a.w), p.o = narrow(a.o);
  p.out_h = narrow(a.out_h), p.out_w = narrow(a.out_w), p.kernel_h = narrow(a.kernel_h);
  p.stride_h = narrow(a.stride_h), p.stride_w = narrow(a.stride_w);
  p.pad_h = narrow(a.pad_h), p.pad_w = narrow(a.pad_w);
  p.dilation_h = narrow(a.dilation_h), p.dilation_w = narrow(a.dilation_w);
  p.all_items = narrow(items_of(a));
  p.item_groups = narrow(item_groups_of(a));
  p.items = narrow(items_per_block(a));
  p.splits = narrow(splits_of(a));
  p.threads = narrow(ceil_div(int64_t{p.items} * p.splits, kWarp) * kWarp);
  p.rows = narrow(band_rows(a));
  p.bands = narrow(ceil_div(a.out_h, p.rows));
  p.chunks = narrow(a.n * p.bands);
  p.per_block = narrow(ceil_div(p.chunks, std::clamp<int64_t>(groups, 1, p.chunks)));
  p.blocks = narrow(ceil_div(p.chunks, p.per_block));
  p.out_pad = narrow(ceil_div(a.o, kOutPerItem) * kOutPerItem);
  p.x_rows = narrow(x_rows_of(a, p.rows));
  p.x_width = narrow(x_width_of(a));
  const XLayout x_layout = x_layout_of(a, p.rows);
  p.x_pitch = narrow(x_layout.pitch), p.x_plane = narrow(x_layout.plane);
  p.g_width = narrow(g_width_of(a));
  p.quads = quad_walk(a);
  p.rounding = staged_rounding();
  p.bias_strands = bias ? p.threads / p.o : 0;
  p.g_walk = GridWalk(p.g_width, p.threads);
  p.x_walk = GridWalk(p.x_width, p.threads);
  p.by_rows = FastDiv(p.rows);
  p.by_x_rows = FastDiv(p.x_rows);
  return p;
}

// The bank of each lane's first x load, as the kernel addresses x_band (wgrad_direct_kernel:
// x_item, then the walk's first position or quad), in the given layout.
double x_load_wavefronts(const DirectPlan& p, const XLayout& layout) {
  int64_t wavefronts = 0, warps = 0;
  for (int y = 0; y < p.item_groups; ++y) {
    for (int warp = 0; warp < p.threads / kWarp; ++warp) {
      std::vector<std::vector<int64_t>> banks(kBanks);  // the distinct addresses on each bank
      for (int t = warp * kWarp; t < (warp + 1) * kWarp; ++t) {
        const int local = t / p.splits, split = t % p.splits;
        const int item = y * p.items + local;
        if (local >= p.items || item >= p.all_items) continue;
        const int64_t ki = item % p.kernel_h, c = item / p.kernel_h % p.c;
        const int64_t width = p.quads ? p.g_width / kQuad : p.out_w;  // quads or positions a row
        const int64_t step = p.quads ? kQuad : p.stride_w;
        const int64_t at = c * layout.plane + ki * p.dilation_h * layout.pitch +
                           split / width * p.stride_h * layout.pitch + split % width * step;
        auto& bank = banks[static_cast<size_t>(at % kBanks)];
        if (std::find(bank.begin(), bank.end(), at) == bank.end()) bank.push_back(at);
      }
      size_t most = 0;
      for (const auto& bank : banks) most = std::max(most, bank.size());
      if (most > 0) wavefronts += static_cast<int64_t>(most), ++warps;
    }
  }
  return warps > 0 ? static_cast<double>(wavefronts) / static_cast<double>(warps) : 0.0;
}

std::atomic<bool>& direct_flag() {
  static std::atomic<bool> flag = switches::conv_wgrad_direct();
  return flag;
}

}  // namespace

bool wgrad_direct_fits(const Conv2dGeometry& a) {
  const bool width = a.kernel_w == 3 || a.kernel_w == 5 || a.kernel_w == 7;
  return width && a.n > 0 && a.o > 0 && a.c > 0 && a.out_h > 0 && a.out_w > 0 &&
         item_groups_of(a) <= kMaxItemGroups && band_bytes(a, 1) <= kBandBytes &&
         conv_gemm_fits(a) && a.n * a.out_h <= INT_MAX;
}

int64_t wgrad_direct_most_groups(const Conv2dGeometry& a) {
  return chunks_of(a);
}

int64_t wgrad_direct_groups(const Conv2dGeometry& a) {
  return std::min(wanted_groups(a), chunks_of(a));
}

double wgrad_direct_x_load_wavefronts(const Conv2dGeometry& a, bool padded) {
  ECH_CHECK(wgrad_direct_fits(a),
            "wgrad_direct_x_load_wavefronts: the direct kernel does not take "
            "this convolution (O=",
            a.o, ", C=", a.c, ", kernel ", a.kernel_h, "x", a.kernel_w, ")");
  const DirectPlan p = plan_for(a, wgrad_direct_groups(a), false);
  return x_load_wavefronts(p, x_layout_of(a, p.rows, padded));
}

bool wgrad_direct_sums_bias(const Conv2dGeometry& a) {
  return float32_precision() == Precision::Fp32 && wgrad_direct_fits(a) && item_groups_of(a) == 1 &&
         a.o <= plan_for(a, 1, false).threads;
}

void conv2d_backward_weight_direct(const Conv2dGeometry& a, int64_t groups, const float* grad_out,
                                   const float* x, float* grad_w, cudaStream_t stream,
                                   float* grad_bias) {
  const char* op = "conv2d_backward_weight (direct)";
  ECH_CHECK(wgrad_direct_fits(a), op, ": the direct kernel does not take this convolution (O=", a.o,
            ", C=", a.c, ", kernel ", a.kernel_h, "x", a.kernel_w, ", output ", a.out_h, "x",
            a.out_w, ")");
  ECH_CHECK(!grad_bias || wgrad_direct_sums_bias(a), op,
            ": the bias gradient comes along only under fp32 and for at most as many output "
            "channels as the kernel's threads (O=",
            a.o, ", ", name(float32_precision()), ")");
  const DirectPlan p = plan_for(a, groups, grad_bias != nullptr);
  const int64_t weights = a.o * a.c * a.kernel_h * a.kernel_w;
  const int64_t stride = weights + (grad_bias ? a.o : 0);  // a block's partial: weights, bias
  const auto launch = [&](float* out, float* out_bias) {
    const size_t bytes = p.shared_bytes();
    const dim3 grid(static_cast<unsigned>(p.blocks), static_cast<unsigned>(p.item_groups));
    switch (a.kernel_w) {
      case 3:
        ECH_LAUNCH(grid, p.threads, bytes, stream, wgrad_direct_kernel<3>)
        (p, grad_out, x, out, out_bias, stride);
        break;
      case 5:
        ECH_LAUNCH(grid, p.threads, bytes, stream, wgrad_direct_kernel<5>)
        (p, grad_out, x, out, out_bias, stride);
        break;
      default:
        ECH_LAUNCH(grid, p.threads, bytes, stream, wgrad_direct_kernel<7>)
        (p, grad_out, x, out, out_bias, stride);
        break;
    }
    ECH_CUDA_CHECK_LAUNCH(op);
  };
  if (p.blocks == 1) return launch(grad_w, grad_bias);
  // (blocks, stride): each block's weights, then its bias sums.
  Scratch partial(static_cast<size_t>(p.blocks * stride) * sizeof(float), stream);
  launch(partial.as<float>(), partial.as<float>() + weights);
  sum_groups(partial.as<const float>(), p.blocks, stride, false, grad_w, stream, grad_bias,
             weights);
}

void set_conv_wgrad_direct(bool on) {
  direct_flag().store(on, std::memory_order_relaxed);
}

bool conv_wgrad_direct() {
  return direct_flag().load(std::memory_order_relaxed);
}

}  // namespace echelon::cuda
