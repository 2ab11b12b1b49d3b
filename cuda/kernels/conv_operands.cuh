// The implicit-GEMM convolution's operands (cuda/kernels/conv_gemm.cu): the passes' GEMM shapes,
// the geometry in 32-bit ints, the gathers of x and grad_out through the conv geometry, the
// per-block gather table of the register-staged tiles and the weight gradient's column table,
// ConvOperands, the operand loader the block tiles of gemm_tile.cuh stage from, and the
// launchers' rules for the tables. Only conv_gemm.cu includes it.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>

#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/kernels/fast_div.h>

#include "gemm_tile.cuh"

namespace echelon::cuda::conv_gemm_detail {

using namespace tile;

struct GemmShape {
  int64_t M, N, K;
};

__host__ __device__ inline GemmShape gemm_shape(ConvPass pass, const Conv2dGeometry& g) {
  const int64_t taps = g.kernel_h * g.kernel_w, plane = g.out_h * g.out_w;
  switch (pass) {
    case ConvPass::Forward:
      return {g.o, g.n * plane, g.c * taps};
    case ConvPass::BackwardData:
      return {g.c, g.n * g.h * g.w, g.o * taps};
    default:
      return {g.o, g.c * taps, g.n * plane};
  }
}

// The geometry in 32-bit ints for the kernels' index math (64-bit division costs several times
// more instructions on a GPU, and the gathers divide per element): conv_gemm_fits (the
// launchers' caller checks it) keeps every operand below 2^31 elements, so every offset fits.
// Every index the gathers split is non-negative, so they divide by the sizes through FastDiv
// (kernels/fast_div.h: a multiply-high, an add and a shift instead of ~15 instructions a
// division; the same quotients). Built on the host by the launcher, passed by value.
// Grad input's store: pixel (i, j) of an image lands at grad_in offset
// image_base + row0_offset + i*row_stride + j*col_stride (image_base = (image*C + c)*
// image_pixels): the geometry's own (h, w) image unless a phase of a strided convolution
// (GradInPhase, conv_phases.cu) places it in the full image.
struct ConvIndex {
  int n, c, h, w, o, out_h, out_w;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int taps, plane, pixels;                                // kernel_h*kernel_w, out_h*out_w, h*w
  int M, N, K;                                            // the pass's GEMM shape
  int image_pixels, row0_offset, row_stride, col_stride;  // grad input's store (above)
  FastDiv by_kernel_w, by_taps, by_out_w, by_plane, by_pixels, by_w, by_stride_h, by_stride_w;

  ConvIndex(const Conv2dGeometry& a, const GemmShape& s, const GradInPhase* phase = nullptr)
      : n(static_cast<int>(a.n)),
        c(static_cast<int>(a.c)),
        h(static_cast<int>(a.h)),
        w(static_cast<int>(a.w)),
        o(static_cast<int>(a.o)),
        out_h(static_cast<int>(a.out_h)),
        out_w(static_cast<int>(a.out_w)),
        kernel_h(static_cast<int>(a.kernel_h)),
        kernel_w(static_cast<int>(a.kernel_w)),
        stride_h(static_cast<int>(a.stride_h)),
        stride_w(static_cast<int>(a.stride_w)),
        pad_h(static_cast<int>(a.pad_h)),
        pad_w(static_cast<int>(a.pad_w)),
        dilation_h(static_cast<int>(a.dilation_h)),
        dilation_w(static_cast<int>(a.dilation_w)),
        taps(kernel_h * kernel_w),
        plane(out_h * out_w),
        pixels(h * w),
        M(static_cast<int>(s.M)),
        N(static_cast<int>(s.N)),
        K(static_cast<int>(s.K)),
        image_pixels(phase ? static_cast<int>(phase->height * phase->width) : pixels),
        row0_offset(phase ? static_cast<int>(phase->row0 * phase->width + phase->col0) : 0),
        row_stride(phase ? static_cast<int>(phase->row_step * phase->width) : w),
        col_stride(phase ? static_cast<int>(phase->col_step) : 1),
        by_kernel_w(kernel_w),
        by_taps(taps),
        by_out_w(out_w),
        by_plane(plane),
        by_pixels(pixels),
        by_w(w),
        by_stride_h(stride_h),
        by_stride_w(stride_w) {}

  // k of the im2col rows = (outer, ki, kj): outer = c (x) or o (grad_out), tap t = ki*KW + kj.
  __device__ __forceinline__ void split_row(int k, int& outer, int& ki, int& kj) const {
    int t;
    by_taps.divmod(k, outer, t);
    by_kernel_w.divmod(t, ki, kj);
  }
};

// cols(r, q) of image n: x (n, c, oh*sh - ph + ki*dh, ow*sw - pw + kj*dw) for r = (c, ki, kj),
// q = (oh, ow); zero in the padding.
__device__ __forceinline__ float gather_input(const ConvIndex& g, const float* x, int n, int r,
                                              int q) {
  int c, ki, kj, oh, ow;
  g.split_row(r, c, ki, kj);
  g.by_out_w.divmod(q, oh, ow);
  const int h = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
  const int w = ow * g.stride_w - g.pad_w + kj * g.dilation_w;
  return h >= 0 && h < g.h && w >= 0 && w < g.w ? x[((n * g.c + c) * g.h + h) * g.w + w] : 0.0f;
}

// What input pixel p = (h, w) of image n receives through tap t = (o, ki, kj): grad_out
// (n, o, oh, ow) where oh*sh - ph + ki*dh = h and ow*sw - pw + kj*dw = w; zero when no such
// output position exists.
__device__ __forceinline__ float gather_grad_out(const ConvIndex& g, const float* grad_out, int n,
                                                 int t, int p) {
  int o, ki, kj, ph, pw, oh, ow, rh, rw;
  g.split_row(t, o, ki, kj);
  g.by_w.divmod(p, ph, pw);
  const int oh_scaled = ph + g.pad_h - ki * g.dilation_h;
  const int ow_scaled = pw + g.pad_w - kj * g.dilation_w;
  if (oh_scaled < 0 || ow_scaled < 0) return 0.0f;
  g.by_stride_h.divmod(oh_scaled, oh, rh);
  g.by_stride_w.divmod(ow_scaled, ow, rw);
  if (rh != 0 || rw != 0) return 0.0f;
  if (oh >= g.out_h || ow >= g.out_w) return 0.0f;
  return grad_out[((n * g.o + o) * g.out_h + oh) * g.out_w + ow];
}

// The gathers above for the 4-byte cp.async of the gather tiles (gemm_tile.cuh, AsyncGather):
// whether the element lies inside (x, resp. on a grad_out position), p its address; else p = the
// operand's base, an aligned address the zero-filling copy does not read. Kept beside the value
// gathers rather than under them, so that the register-staged kernels' code stays as it was.
__device__ __forceinline__ bool input_at(const ConvIndex& g, const float* x, int n, int r, int q,
                                         const float*& p) {
  int c, ki, kj, oh, ow;
  g.split_row(r, c, ki, kj);
  g.by_out_w.divmod(q, oh, ow);
  const int h = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
  const int w = ow * g.stride_w - g.pad_w + kj * g.dilation_w;
  const bool inside = h >= 0 && h < g.h && w >= 0 && w < g.w;
  p = inside ? x + ((n * g.c + c) * g.h + h) * g.w + w : x;
  return inside;
}
__device__ __forceinline__ bool grad_out_at(const ConvIndex& g, const float* grad_out, int n, int t,
                                            int p_in, const float*& p) {
  p = grad_out;
  int o, ki, kj, ph, pw, oh, ow, rh, rw;
  g.split_row(t, o, ki, kj);
  g.by_w.divmod(p_in, ph, pw);
  const int oh_scaled = ph + g.pad_h - g.dilation_h * ki;
  const int ow_scaled = pw + g.pad_w - g.dilation_w * kj;
  if (oh_scaled < 0 || ow_scaled < 0) return false;
  g.by_stride_h.divmod(oh_scaled, oh, rh);
  g.by_stride_w.divmod(ow_scaled, ow, rw);
  if (rh != 0 || rw != 0) return false;
  if (oh >= g.out_h || ow >= g.out_w) return false;
  p = grad_out + ((n * g.o + o) * g.out_h + oh) * g.out_w + ow;
  return true;
}

// ---- the gather table (forward and grad input of the register-staged tiles) -------------------
// The gathers above divide by the kernel and output sizes per element. With a table, a block
// decodes each k of the im2col operand, (c, ki, kj) or (o, ki, kj), once into shared memory:
// {offset delta, bit 1 << (ki*KW + kj)}. The column is a thread's own: these passes stage op(B)
// n-fastest, so a thread's column n0 + tid % kN is the same in every slice (gemm_tile.cuh,
// Part::fetch) and is decoded once per thread into a base offset and a bit mask of the taps
// that land inside the input (grad input: on a grad_out position). The gather is then a shared
// load, a bit test and a load: the same element, or zero, as gather_input / gather_grad_out, so
// the sums and the results are bit-identical.
// Forward entries:     off = c*H*W + ki*dh*W + kj*dw            (x; base: img*C*H*W + h0*W + w0)
// Grad input entries:  off = o*OH*OW - ki*(dh/sh)*OW - kj*(dw/sw) (grad_out; needs dh % sh == 0
//                      and dw % sw == 0, so that the position is linear in (ki, kj))
// The base is signed (a column's first pixel may lie in the padding) and held as a pointer,
// b_src + base: an element's address is one multiply-add from it (session 41: the unsigned
// offset sum and the operand's base, reloaded from the constant bank per element, took two more).
// The grad weight has none: its im2col operand is k-fastest (a thread's (c, ki, kj) columns
// are fixed, its pixel changes per slice), and a table of k there cost 30 registers or spills
// (tools/cuda-resources.py; bench/RESULTS.md, conv23). It decodes its columns instead (below).
// Table entries: K = C*KH*KW up to 512 * 3 * 3 (VGG-16's widest layers), 36 KiB. The table is
// the kernel's dynamic shared memory, sized to the launch's K (table_bytes, below), so
// the 5x5 layers of LeNet-5 pay for 200 entries, not 4608.
constexpr int kTableK = 4608;
constexpr int kNoTap = 31;  // the tap of the entries past K: never a bit of a mask
constexpr int kMaxTableTaps = 31;

struct alignas(8) TableEntry {  // one 8-byte shared load
  int off;
  unsigned bit;  // 1 << (ki*KW + kj), the tap's bit of a column's mask; 1 << kNoTap past K
};

// The weight gradient's column table. Its im2col operand cols^T (N*L, R) is k-fastest: a
// thread's columns r = (c, ki, kj) are the same in every slice while its k = (image, oh, ow)
// moves. So a block decodes its kN columns once into shared memory (fill_columns) as
// {off = c*H*W + ki*dh*W + kj*dw, ki*dh, kj*dw}; a gather then splits k (two FastDivs), tests
// the row and column by unsigned compares and loads: the same element, or zero, as gather_input.
// Columns past R get kNoRow, a row offset no test passes. On with the gather table's switch.
struct alignas(16) ColumnEntry {  // one 16-byte shared load (4 bytes of padding)
  int off, dh, dw;
};
constexpr int kNoRow = -(1 << 30);

// Neither table is in the async-K tiles (TF32, opt-in): the column table took their weight
// gradient from 128 to 134 registers, one block per SM instead of two, and capped at 128 they
// spilled; their ring is the dynamic shared memory the gather table would take. Nor in the gather
// tiles (async-K tiles too), whose gathers go by b_at. Every register-staged tile has them, the
// 128x128 ones since session 40 (before, their forward and grad input split each k by division).
template <typename T, ConvPass P>
constexpr bool has_columns() {
  return P == ConvPass::BackwardWeight && !async_k<T>();
}

template <typename T, ConvPass P>
constexpr bool has_table() {
  return P != ConvPass::BackwardWeight && !async_k<T>();
}

// What the store does with a finished value v, a runtime argument of the kernels (no extra
// instantiations): Write out = v; Relu (forward only) out = v clamped at zero; Add (grad input
// only) out = out + v, one float add: bit for bit the old separate axpy_(sum, grad, 1) of the
// autograd engine's gradient sum (grad input has no split-K, so each element is stored once).
enum class StoreMode : uint8_t { Write, Relu, Add };

// The operand loader (cuda/kernels/gemm_tile.cuh) and the store of one pass. a_src / b_src:
// forward w / x, grad input w / grad_out, grad weight grad_out / x. The tile's int64 (m, n, k)
// are bounds-checked first, then narrowed. kTable: the loader may gather through the table
// (when `table` is set; see above).
template <ConvPass P, bool kTable = false>
struct ConvOperands {
  ConvIndex g;
  const float* a_src;
  const float* b_src;
  StoreMode mode;
  const TableEntry* table = nullptr;     // shared; null: the plain gathers
  const float* col_ptr = nullptr;        // forward, grad input: b_src + this column's base offset
  unsigned col_mask = 0;                 // ... and its taps inside (0 past N)
  int64_t col = 0;                       // ... and its n (the emulation build's check)
  const ColumnEntry* columns = nullptr;  // grad weight: shared, the block's columns; null: plain
  int64_t col0 = 0;                      // ... the first one's n

  // i < bound, for a tile's index i (below bound + one tile, so below 2^32), in 32-bit unsigned
  // arithmetic: compared in 64 bits, the indices feeding it were computed in 64 bits too (twice
  // the instructions in every slice; tools/sass-loops.py).
  __device__ static bool below(int64_t i, int bound) {
    return static_cast<uint32_t>(i) < static_cast<uint32_t>(bound);
  }

  __device__ bool a_k_fastest() const { return true; }  // w rows; grad_out's (n, o) planes
  __device__ bool b_k_fastest() const { return P == ConvPass::BackwardWeight; }  // cols^T
  // 16-byte runs along k: w's rows (forward) when R is a multiple of 4; grad_out's planes (grad
  // weight) when OH*OW is (a run then never crosses an image). The gathers have none.
  __device__ bool a_vector() const {
    const bool aligned = reinterpret_cast<uintptr_t>(a_src) % (kVec * sizeof(float)) == 0;
    if constexpr (P == ConvPass::Forward) return aligned && g.K % kVec == 0;
    if constexpr (P == ConvPass::BackwardWeight) return aligned && g.plane % kVec == 0;
    return false;
  }
  __device__ bool b_vector() const { return false; }
  // The offsets of op(A)(m, k) where A is not w's plain rows: the grad weight's grad_out
  // (n, m, q) for k = (n, q); the grad input's w (o, m, tap) for k = (o, tap).
  __device__ __forceinline__ int grad_out_offset(int m, int k) const {
    int image, q;
    g.by_plane.divmod(k, image, q);
    return (image * g.o + m) * g.plane + q;
  }
  __device__ __forceinline__ int weight_offset(int m, int k) const {
    int o, tap;
    g.by_taps.divmod(k, o, tap);
    return (o * g.c + m) * g.taps + tap;
  }
  // A run of 4 from (m, k); only for a_vector() passes, where k0 and K are multiples of 4.
  __device__ int a_span(int64_t m_wide, int64_t k_wide, const float*& p) const {
    p = a_src;
    if (!below(m_wide, g.M) || !below(k_wide, g.K)) return 0;
    const int m = static_cast<int>(m_wide), k = static_cast<int>(k_wide);
    p = a_src + (P == ConvPass::Forward ? m * g.K + k : grad_out_offset(m, k));
    return kVec;
  }
  __device__ int b_span(int64_t, int64_t, const float*& p) const {
    p = b_src;
    return 0;  // never called: b_vector() is false
  }

  // The offset is computed before the bounds test, and b()'s column gather splits k before it:
  // in the 128x128 tiles a thread's elements share their k (Part::element), and a split inside
  // each element's branch was computed once per element (8 times a slice), not once.
  __device__ float a(int64_t m_wide, int64_t k_wide) const {
    const int m = static_cast<int>(m_wide), k = static_cast<int>(k_wide);
    const int offset = P == ConvPass::Forward        ? m * g.K + k
                       : P == ConvPass::BackwardData ? weight_offset(m, k)
                                                     : grad_out_offset(m, k);
    return below(m_wide, g.M) && below(k_wide, g.K) ? a_src[offset] : 0.0f;
  }

  __device__ float b(int64_t k_wide, int64_t n_wide) const {
    if constexpr (kTable) {
      if (table) {  // n_wide is this thread's column (checked in the emulation build)
#if ECHELON_CUDA_SIM
        if (n_wide != col) __trap();
#endif
        const TableEntry e = table[k_wide];  // k < K rounded up to slices: past K, kNoTap
        return col_mask & e.bit ? col_ptr[e.off] : 0.0f;
      }
    }
    if constexpr (P == ConvPass::BackwardWeight) {
      if (columns) {  // n_wide - col0 < the tile's kN (Part::fetch), past N: kNoRow
        const ColumnEntry e = columns[n_wide - col0];
        int image, q, oh, ow;
        g.by_plane.divmod(static_cast<int>(k_wide), image, q);
        g.by_out_w.divmod(q, oh, ow);
        const int h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
        const bool inside = below(k_wide, g.K) &&
                            static_cast<unsigned>(h0 + e.dh) < static_cast<unsigned>(g.h) &&
                            static_cast<unsigned>(w0 + e.dw) < static_cast<unsigned>(g.w);
        return inside ? b_src[image * g.c * g.pixels + h0 * g.w + w0 + e.off] : 0.0f;
      }
    }
    if (!below(k_wide, g.K) || !below(n_wide, g.N)) return 0.0f;
    const int k = static_cast<int>(k_wide), n = static_cast<int>(n_wide);
    int image, position;  // n = (image, pixel) (grad input) or (image, output position)
    if constexpr (P == ConvPass::BackwardData) {
      g.by_pixels.divmod(n, image, position);
      return gather_grad_out(g, b_src, image, k, position);
    }
    g.by_plane.divmod(P == ConvPass::Forward ? n : k, image, position);
    return gather_input(g, b_src, image, P == ConvPass::Forward ? k : n, position);
  }

  // a() and b() as addresses, for the gather tiles' 4-byte cp.async (gemm_tile.cuh,
  // AsyncGather): whether (m, k) / (k, n) lies inside op(A) / op(B) and is not padding, p its
  // address; else p = the operand's base (the copy zero-fills and reads nothing). These tiles
  // have no gather table.
  __device__ bool a_at(int64_t m_wide, int64_t k_wide, const float*& p) const {
    p = a_src;
    if (!below(m_wide, g.M) || !below(k_wide, g.K)) return false;
    const int m = static_cast<int>(m_wide), k = static_cast<int>(k_wide);
    p = a_src + (P == ConvPass::Forward        ? m * g.K + k
                 : P == ConvPass::BackwardData ? weight_offset(m, k)
                                               : grad_out_offset(m, k));
    return true;
  }
  __device__ bool b_at(int64_t k_wide, int64_t n_wide, const float*& p) const {
    static_assert(!kTable, "the gather tiles gather by address: no table");
    p = b_src;
    if (!below(k_wide, g.K) || !below(n_wide, g.N)) return false;
    const int k = static_cast<int>(k_wide), n = static_cast<int>(n_wide);
    int image, position;  // as in b()
    if constexpr (P == ConvPass::BackwardData) {
      g.by_pixels.divmod(n, image, position);
      return grad_out_at(g, b_src, image, k, position, p);
    }
    g.by_plane.divmod(P == ConvPass::Forward ? n : k, image, position);
    return input_at(g, b_src, image, P == ConvPass::Forward ? k : n, position, p);
  }

  // C(m, n) = v (+ bias[m], then ReLU'd under StoreMode::Relu, in the forward; grad input: + the
  // old C(m, n) under StoreMode::Add). Under split-K (grid z > 1) each group writes its partial,
  // the output's layout at `out` + z * M * N, and sum_split / sum_groups add them. The clamp is
  // `r > 0 ? r : 0`, the ReLU twin's, NaN -> 0 included.
  // Column n's share of the address is split before the bounds test, from an n clamped into
  // range: the tiles' epilogues store 8 to 16 elements of each of a thread's columns, and the
  // compiler computes an expression shared by those stores once only when its first instance
  // is not inside a branch (inside, each element paid one or two FastDivs).
  __device__ void store(float* out, const float* bias, int64_t m_wide, int64_t n_wide,
                        float v) const {
    const bool inside = below(m_wide, g.M) && below(n_wide, g.N);
    const int m = static_cast<int>(m_wide), n = below(n_wide, g.N) ? static_cast<int>(n_wide) : 0;
    int image, position;
    out += static_cast<int64_t>(blockIdx.z) * g.M * g.N;  // the group's partial (z = 0: out)
    if constexpr (P == ConvPass::Forward) {
      g.by_plane.divmod(n, image, position);
      const int column = image * g.o * g.plane + position;  // y (image, 0, position)
      if (!inside) return;
      const float r = v + (bias ? bias[m] : 0.0f);
      out[column + m * g.plane] = mode != StoreMode::Relu || r > 0.0f ? r : 0.0f;
    } else if constexpr (P == ConvPass::BackwardData) {
      int i, j;  // the pixel's row and column in the geometry's image
      g.by_pixels.divmod(n, image, position);
      g.by_w.divmod(position, i, j);
      const int column = image * g.c * g.image_pixels + g.row0_offset + i * g.row_stride +
                         j * g.col_stride;  // grad_in (image, 0, pixel)
      if (!inside) return;
      float& dst = out[column + m * g.image_pixels];
      dst = mode == StoreMode::Add ? dst + v : v;
    } else {
      if (!inside) return;
      out[m * g.N + n] = v;
    }
  }
};

// Fills entries [0, entries) of the block's table (see "the gather table"); kNoTap from K on.
// Every thread calls it; a barrier must follow.
template <ConvPass P>
__device__ void fill_table(const ConvIndex& g, TableEntry* table, int entries) {
  for (int k = static_cast<int>(threadIdx.x); k < entries; k += kThreads) {
    if (k >= g.K) {
      table[k] = {0, 1u << kNoTap};
      continue;
    }
    int outer, ki, kj;
    g.split_row(k, outer, ki, kj);
    const int t = ki * g.kernel_w + kj;
    if constexpr (P == ConvPass::BackwardData)  // outer = o
      table[k] = {outer * g.plane - ki * (g.dilation_h / g.stride_h) * g.out_w -
                      kj * (g.dilation_w / g.stride_w),
                  1u << t};
    else  // outer = c
      table[k] = {outer * g.pixels + ki * g.dilation_h * g.w + kj * g.dilation_w, 1u << t};
  }
}

// The grad weight's columns [n0, n0 + count) (see "the weight gradient's column table"). Every
// thread calls it; a barrier must follow.
__device__ inline void fill_columns(const ConvIndex& g, ColumnEntry* columns, int64_t n0,
                                    int count) {
  for (int i = static_cast<int>(threadIdx.x); i < count; i += kThreads) {
    if (n0 + i >= g.N) {
      columns[i] = {0, kNoRow, 0};
      continue;
    }
    int c, ki, kj;
    g.split_row(static_cast<int>(n0 + i), c, ki, kj);
    const int dh = ki * g.dilation_h, dw = kj * g.dilation_w;
    columns[i] = {c * g.pixels + dh * g.w + dw, dh, dw};
  }
}

// Forward and grad input: column n's base offset and its mask of taps that land inside (bit
// ki*KW + kj); 0 past N.
template <ConvPass P>
__device__ void decode_column(const ConvIndex& g, int n, int& base, unsigned& mask) {
  base = 0, mask = 0;
  if (n >= g.N) return;
  if constexpr (P == ConvPass::Forward) {
    const int q = n % g.plane;
    const int h0 = (q / g.out_w) * g.stride_h - g.pad_h, w0 = (q % g.out_w) * g.stride_w - g.pad_w;
    base = (n / g.plane) * g.c * g.pixels + h0 * g.w + w0;
    for (int ki = 0; ki < g.kernel_h; ++ki)
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const int h = h0 + ki * g.dilation_h, w = w0 + kj * g.dilation_w;
        if (h >= 0 && h < g.h && w >= 0 && w < g.w) mask |= 1u << (ki * g.kernel_w + kj);
      }
  } else {  // grad input: pixel (h, w) receives tap (ki, kj) from (oh_b - ki*dh/sh, ow_b - ...)
    const int p = n % g.pixels, hs = p / g.w + g.pad_h, ws = p % g.w + g.pad_w;
    if (hs % g.stride_h != 0 || ws % g.stride_w != 0) return;  // no tap: dh, dw multiples of s
    const int oh_b = hs / g.stride_h, ow_b = ws / g.stride_w;
    base = (n / g.pixels) * g.o * g.plane + oh_b * g.out_w + ow_b;
    for (int ki = 0; ki < g.kernel_h; ++ki)
      for (int kj = 0; kj < g.kernel_w; ++kj) {
        const int oh = oh_b - ki * (g.dilation_h / g.stride_h);
        const int ow = ow_b - kj * (g.dilation_w / g.stride_w);
        if (oh >= 0 && oh < g.out_h && ow >= 0 && ow < g.out_w)
          mask |= 1u << (ki * g.kernel_w + kj);
      }
  }
}

// ---- the launchers' rules for the tables (host) --------------------------------------------

// Whether a configuration's kernel has its pass's table (has_table, has_columns): every one whose
// ring is not cp.async-staged (the async-K and gather tiles have neither).
inline bool config_has_table(const ConvConfig& c) {
  return !c.async_k && !c.async_gather;
}

// The table's shared bytes for K rounded up to k-slices of depth `slice` (what fill_table fills).
inline size_t table_bytes(int64_t k, int slice) {
  return static_cast<size_t>((k + slice - 1) / slice * slice) * sizeof(TableEntry);
}

// Whether the gather table can take pass P of this convolution (its kernels: config_has_table).
inline bool table_legal(ConvPass pass, const Conv2dGeometry& g, const GemmShape& s) {
  const bool taps = g.kernel_h * g.kernel_w <= kMaxTableTaps;
  const bool k_fits = (s.K + 15) / 16 * 16 <= kTableK;  // rounded to the deepest k-slice
  const int64_t reach_h = (g.kernel_h - 1) * g.dilation_h,
                reach_w = (g.kernel_w - 1) * g.dilation_w;
  switch (pass) {
    case ConvPass::Forward:  // the entries' offsets must fit an int
      return taps && k_fits && g.c * g.h * g.w + reach_h * g.w + reach_w < INT_MAX;
    case ConvPass::BackwardData:  // the grad_out position must be linear in (ki, kj)
      return taps && k_fits && g.dilation_h % g.stride_h == 0 && g.dilation_w % g.stride_w == 0 &&
             g.o * g.out_h * g.out_w + reach_h * g.out_w + reach_w < INT_MAX;
    default:  // the column table's offsets are x's, below 2^31 (conv_gemm_fits)
      return true;
  }
}

}  // namespace echelon::cuda::conv_gemm_detail
