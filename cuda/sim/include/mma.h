// CUDA emulation build (ECHELON_CUDA_SIM): stands in for <mma.h>, the warp matrix (WMMA) API, in
// the subset Echelon uses: TF32 inputs (16 x 16 x 8 tiles; the kernels' TF32 now goes by
// mma_m16n8k8_tf32 below, and this product is the reference its tests compare it with) or bf16
// inputs (16 x 16 x 16 tiles, loaded from __nv_bfloat16 memory), float accumulators; and PTX's
// mma.sync m16n8k8 TF32, which has no C++ API (mma_m16n8k8_tf32, at the end).
//
// Real fragments spread a tile over the warp's 32 lanes in an unspecified way, so kernels may only
// treat fragment elements uniformly (frag.x[i] for every i < num_elements). Here every lane holds
// the whole tile, which any such kernel cannot tell apart. The parts that can go wrong are kept:
// load, store and mma are warp-collective (each waits until all 32 lanes of the warp arrive, as
// __syncwarp does; a diverged or partial warp fails the launch), a pointer must be 32-byte
// aligned and ldm a multiple of 16 bytes (4 floats, 8 bf16; else the launch fails, where a GPU
// gives garbage or a fault), the MMA reads only the TF32 bits of TF32 inputs (as the tensor cores
// do: unrounded inputs are truncated, not rounded; bf16 inputs are bf16 values already, and their
// products are exact in fp32), and a store writes each element from exactly one lane (the one
// holding it on a GPU), so a kernel that reads another lane's elements without __syncwarp after the
// store sees stale memory.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include <cuda_bf16.h>
#include <echelon/cuda/sim/device.h>

namespace nvcuda::wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

template <typename Use, int M, int N, int K>
struct Shape;
template <int M, int N, int K>
struct Shape<matrix_a, M, N, K> {
  static constexpr int kRows = M, kCols = K;
};
template <int M, int N, int K>
struct Shape<matrix_b, M, N, K> {
  static constexpr int kRows = K, kCols = N;
};
template <int M, int N, int K>
struct Shape<accumulator, M, N, K> {
  static constexpr int kRows = M, kCols = N;
};

#define ECH_WMMA_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()

// The warp-collective entry: all 32 lanes must arrive (the warp_op names the caller's file:line).
inline void converge(const char* file, int line) {
  using namespace echelon::cudasim::detail;
  warp_op(WarpOp::Syncwarp, 0xffffffffu, 0, 0, 32, file, line);
}

// The calling thread's index within its block, x fastest.
inline unsigned linear_thread() {
  const auto& c = echelon::cudasim::detail::coordinates();
  return c.thread_idx.x + c.block_dim.x * (c.thread_idx.y + c.block_dim.y * c.thread_idx.z);
}

inline unsigned lane() {
  return linear_thread() % 32;
}

// ldm counts elements of `element_bytes`; it must span a multiple of 16 bytes.
inline void check_operand(const void* ptr, unsigned ldm, int min_ldm, unsigned element_bytes,
                          const char* what, const char* file, int line) {
  const unsigned multiple = 16 / element_bytes;
  if (reinterpret_cast<uintptr_t>(ptr) % 32 != 0 || ldm % multiple != 0 ||
      static_cast<int>(ldm) < min_ldm)
    echelon::cudasim::detail::device_error(
        std::string(what) + " at " + file + ":" + std::to_string(line) +
        ": the pointer must be 32-byte aligned and ldm a multiple of " + std::to_string(multiple) +
        " of at least " + std::to_string(min_ldm) + " (ldm = " + std::to_string(ldm) + ")");
}

inline float value_of(float v) {
  return v;
}
inline float value_of(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// The memory element type of an operand fragment of precision T.
template <typename T>
struct Element {
  using type = float;  // precision::tf32
};
template <>
struct Element<__nv_bfloat16> {
  using type = __nv_bfloat16;
};

// The value the tensor cores see of a TF32 operand: the low 13 mantissa bits ignored.
inline float tf32_bits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  bits &= ~0x1fffu;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
 public:
  using S = detail::Shape<Use, M, N, K>;
  static constexpr int kRows = S::kRows, kCols = S::kCols;
  static constexpr int num_elements = kRows * kCols;
  float x[num_elements];  // [row * kCols + col]: the whole tile, in every lane
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& frag, float value) {
  for (float& v : frag.x) v = value;
}

// Tiles of A (M x K) or B (K x N); Layout (row_major / col_major) says how they lie in memory:
// floats for TF32 fragments, __nv_bfloat16 for bf16 ones (held here as their float values).
template <typename Use, int M, int N, int K, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& frag,
                             const typename detail::Element<T>::type* ptr, unsigned ldm,
                             ECH_WMMA_SITE) {
  using F = fragment<Use, M, N, K, T, Layout>;
  constexpr bool kRowMajor = std::is_same_v<Layout, row_major>;
  detail::converge(file, line);
  detail::check_operand(ptr, ldm, kRowMajor ? F::kCols : F::kRows, sizeof *ptr,
                        "wmma::load_matrix_sync", file, line);
  for (int r = 0; r < F::kRows; ++r)
    for (int c = 0; c < F::kCols; ++c)
      frag.x[r * F::kCols + c] = detail::value_of(kRowMajor ? ptr[r * ldm + c] : ptr[c * ldm + r]);
}

template <int M, int N, int K>
inline void load_matrix_sync(fragment<accumulator, M, N, K, float>& frag, const float* ptr,
                             unsigned ldm, layout_t layout, ECH_WMMA_SITE) {
  detail::converge(file, line);
  detail::check_operand(ptr, ldm, layout == mem_row_major ? N : M, sizeof(float),
                        "wmma::load_matrix_sync", file, line);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      frag.x[r * N + c] = layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r];
}

// Each element is written by the lane that holds it in the tensor cores' accumulator layout (as
// PTX documents it for mma.m16n8k8: lane 4 g + t holds rows g and g + 8, columns 2 t and 2 t + 1
// of each 8-column half). A kernel that then reads the tile by any other mapping (rows, or e % 32)
// reads other lanes' elements and needs __syncwarp, as on a GPU.
template <int M, int N, int K>
inline void store_matrix_sync(float* ptr, const fragment<accumulator, M, N, K, float>& frag,
                              unsigned ldm, layout_t layout, ECH_WMMA_SITE) {
  static_assert(M == 16 && N == 16, "the emulated store knows the 16 x 16 accumulator layout");
  detail::converge(file, line);
  detail::check_operand(ptr, ldm, layout == mem_row_major ? N : M, sizeof(float),
                        "wmma::store_matrix_sync", file, line);
  const int me = static_cast<int>(detail::lane());
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      if ((r % 8) * 4 + (c % 8) / 2 == me)
        (layout == mem_row_major ? ptr[r * ldm + c] : ptr[c * ldm + r]) = frag.x[r * N + c];
}

namespace detail {

// The last product a warp computed: its inputs' bytes and its result. Every lane holds the whole
// tile here, so the 32 lanes of a warp would each compute the same 16 x 16 x K product; the memo
// lets the first lane compute it and the others copy it. It is keyed by the inputs' bytes, not
// by the lane or the call, so a lane whose fragments differ from its warp's (a kernel bug the
// tests must see) still gets its own product, and an entry left by another block is harmless.
template <int M, int N, int K>
struct MmaMemo {
  float a[M * K], b[K * N], c[M * N], d[M * N];
  bool valid = false;

  bool holds(const float* a_in, const float* b_in, const float* c_in) const {
    return valid && std::memcmp(a, a_in, sizeof a) == 0 && std::memcmp(b, b_in, sizeof b) == 0 &&
           std::memcmp(c, c_in, sizeof c) == 0;
  }
};

// The calling thread's warp within its block (a block runs on one worker thread at a time, so a
// worker's memos serve one block's warps: at most 1024 / 32).
inline unsigned warp_in_block() {
  return linear_thread() / 32;
}

}  // namespace detail

// d = a b + c (d may be c), in fp32, k in order: over the TF32 bits of a and b (16x16x8), or
// over bf16 a and b (16x16x16; the fragments hold bf16 values, their products are exact).
template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, M, N, K, float>& d,
                     const fragment<matrix_a, M, N, K, T, LayoutA>& a,
                     const fragment<matrix_b, M, N, K, T, LayoutB>& b,
                     const fragment<accumulator, M, N, K, float>& c, ECH_WMMA_SITE) {
  constexpr bool kTf32 = std::is_same_v<T, precision::tf32>;
  static_assert((kTf32 && K == 8) || (std::is_same_v<T, __nv_bfloat16> && K == 16),
                "the emulated MMA knows m16n16k8 TF32 and m16n16k16 bf16");
  const auto input = [](float v) { return kTf32 ? detail::tf32_bits(v) : v; };
  detail::converge(file, line);
  thread_local detail::MmaMemo<M, N, K> memos[32];
  detail::MmaMemo<M, N, K>& memo = memos[detail::warp_in_block()];
  if (!memo.holds(a.x, b.x, c.x)) {
    std::memcpy(memo.a, a.x, sizeof memo.a);
    std::memcpy(memo.b, b.x, sizeof memo.b);
    std::memcpy(memo.c, c.x, sizeof memo.c);
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float acc = memo.c[m * N + n];
        for (int k = 0; k < K; ++k)
          acc = std::fma(input(memo.a[m * K + k]), input(memo.b[k * N + n]), acc);
        memo.d[m * N + n] = acc;
      }
    memo.valid = true;
  }
  std::memcpy(d.x, memo.d, sizeof d.x);
}

// PTX mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32, which has no C++ API (the kernels
// reach it through cuda/kernels/mma_tile.cuh's mma_m16n8k8_tf32). Unlike a WMMA fragment, its
// registers have a documented layout, and each lane holds only its share (lane 4 g + t):
//   A (16 x 8):  a0 = (g, t), a1 = (g + 8, t), a2 = (g, t + 4), a3 = (g + 8, t + 4);
//   B (8 x 8):   b0 = (t, g), b1 = (t + 4, g);
//   C, D (16 x 8): c0 = (g, 2 t), c1 = (g, 2 t + 1), c2 = (g + 8, 2 t), c3 = (g + 8, 2 t + 1).
// d = a b + d. The lanes post their registers, meet (warp-collective, as mma_sync: a partial or
// diverged warp fails the launch), and each sums its own four elements, k in order, over the TF32
// bits of A and B: the arithmetic of mma_sync above, so a kernel moved from 16x16x8 fragments
// to two m16n8k8 products per 16 columns computes the same bits here. A second meeting keeps a
// lane that runs ahead from posting its next operands before every lane has read these.
inline void mma_m16n8k8_tf32(float (&d)[4], const float (&a)[4], const float (&b)[2],
                             ECH_WMMA_SITE) {
  struct Posted {
    float a[4], b[2];
  };
  thread_local Posted posted[32][32];  // [warp in block][lane]: a block runs on one worker
  Posted(&warp)[32] = posted[detail::warp_in_block()];
  const int me = static_cast<int>(detail::lane()), g = me / 4, t = me % 4;
  std::memcpy(warp[me].a, a, sizeof a);
  std::memcpy(warp[me].b, b, sizeof b);
  detail::converge(file, line);
  float sums[4];
  for (int q = 0; q < 4; ++q) {
    const int row = g + (q / 2) * 8, col = 2 * t + q % 2;
    float acc = d[q];
    for (int k = 0; k < 8; ++k) {
      const float a_rk = warp[(row % 8) * 4 + k % 4].a[row / 8 + 2 * (k / 4)];
      const float b_kc = warp[col * 4 + k % 4].b[k / 4];
      acc = std::fma(detail::tf32_bits(a_rk), detail::tf32_bits(b_kc), acc);
    }
    sums[q] = acc;
  }
  detail::converge(file, line);
  std::memcpy(d, sums, sizeof sums);
}

// Round to nearest TF32, ties away from zero (PTX cvt.rna.tf32.f32). Written as arithmetic on
// the value, not on its bits, so that the tests comparing it with the bit-level CPU rounding
// (kernels/tf32.h) compare two derivations.
inline float __float_to_tf32(float v) {
  if (!std::isfinite(v)) return v;
  if (v == 0.0f) return v;
  int exponent = 0;
  std::frexp(static_cast<double>(v), &exponent);  // |v| = f * 2^exponent, f in [0.5, 1)
  // 11 significant bits; subnormals keep fp32's fixed exponent, so their ulp is 2^-136.
  const double ulp = std::ldexp(1.0, std::max(exponent - 11, -136));
  const double rounded = std::floor(std::fabs(static_cast<double>(v)) / ulp + 0.5) * ulp;
  if (rounded > static_cast<double>(FLT_MAX)) return std::copysign(INFINITY, v);
  return std::copysign(static_cast<float>(rounded), v);
}

#undef ECH_WMMA_SITE

}  // namespace nvcuda::wmma
