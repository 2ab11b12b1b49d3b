// The AVX-512 direct convolution at stride 1 (tensor/cpu/fast/conv_direct_avx512.h). The vector
// functions are compiled for AVX-512 (ECH_AVX512); the copies, offsets and threading around them
// are portable, and conv_direct.cpp calls in only when the ISA setting is Avx512.
#include <echelon/tensor/cpu/fast/conv_direct_avx512.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace echelon::cpu::fast {

#ifdef ECH_AVX512
namespace {

constexpr int64_t kLanes = 16;      // floats per AVX-512 register
constexpr int kRowsPerTile = 6;     // forward / backward data: output rows per register tile
constexpr int kVectorsPerTile = 4;  // ... x position vectors (6 x 4 accumulators)
constexpr int kWeightChannels = 8;  // weight gradient: output channels per register tile
constexpr int kWeightTaps = 3;      // ... x taps (8 x 3 accumulators)
constexpr int64_t kShiftedBudget = 1 << 18;      // floats of one image's shifted copy (1 MiB)
constexpr int64_t kColumnsBudget = 1 << 16;      // floats of one image's backward-data columns
constexpr int64_t kWeightGroupBudget = 1 << 12;  // floats of grad_out per weight pass (16 KiB)
constexpr int64_t kMargin = kLanes;              // floats before and after a buffer's data
constexpr int64_t kMaxWindow = 5;                // the largest K (conv_direct_usable)

// The shifted copy of one image (see the header): at stride S, copy kj * S + ph (ph: the padded
// rows' phase, 0 at stride 1), channel c, row q, column ow holds x[c][q*S + ph - pad][ow*S + kj -
// pad]. Tap (c, ki, kj) of output position p = oh*OW + ow is then element p + (ki / S)*OW of copy
// kj * S + ki % S: at stride 2 too every tap is one run over the positions.
struct Shifted {
  int64_t stride;
  int64_t rows, channel, copy, image;  // rows per copy; element strides of a channel, copy, image
};

Shifted shifted_layout(const Conv2dGeometry& a) {
  Shifted s{};
  s.stride = a.stride_h;
  s.rows = (a.h + 2 * a.pad_h + s.stride - 1) / s.stride;
  s.channel = s.rows * a.out_w;
  s.copy = a.c * s.channel;
  s.image = a.kernel_w * s.stride * s.copy;
  return s;
}

// Offset of tap (c, ki, kj) in the shifted copy, relative to an output position.
std::vector<int64_t> shifted_taps(const Conv2dGeometry& a, const Shifted& s) {
  const int64_t k = a.kernel_w, stride = s.stride;
  std::vector<int64_t> at(static_cast<size_t>(a.c * k * k));
  for (int64_t c = 0; c < a.c; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj)
        at[static_cast<size_t>((c * k + ki) * k + kj)] =
            (kj * stride + ki % stride) * s.copy + c * s.channel + (ki / stride) * a.out_w;
  return at;
}

// Lanes [lo, hi) of a vector as a mask (0 <= lo, hi <= 16).
unsigned lane_range(int64_t lo, int64_t hi) {
  if (hi <= lo) return 0;
  const unsigned below_hi = hi >= kLanes ? 0xFFFFu : (1u << hi) - 1;
  return below_hi & ~((1u << lo) - 1);
}

// One masked 16-float load and store per (copy, channel, row, 16 columns), the masks set once per
// copy and 16 columns: the rows are short (LeNet's 8 and 28 columns), and a memcpy call per row
// cost more than the copy itself. At stride 2 a row's 16 columns are the even elements of 32
// loaded ones.
ECH_AVX512 void shift_image(const Conv2dGeometry& a, const Shifted& s,
                            const float* x /* (C, H, W) */, float* dst) {
  const int64_t out_w = a.out_w, in_w = a.w, top = a.pad_h, bottom = a.pad_h + a.h;
  const int64_t stride = s.stride;
  const __m512 zero = _mm512_setzero_ps();
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  // Lanes of a 16-float load at source element `from` whose input columns lie in [0, in_w).
  const auto inside = [&](int64_t from) {
    return static_cast<__mmask16>(lane_range(std::clamp<int64_t>(-from, 0, kLanes),
                                             std::clamp<int64_t>(in_w - from, 0, kLanes)));
  };
  for (int64_t kj = 0; kj < a.kernel_w; ++kj)
    for (int64_t ow0 = 0; ow0 < out_w; ow0 += kLanes) {
      // Source element j of these 16 columns: input column start + j (every other one taken at
      // stride 2).
      const int64_t start = ow0 * stride + kj - a.pad_w;
      const __mmask16 lo = inside(start), hi = inside(start + kLanes);
      const auto store = static_cast<__mmask16>(lane_range(0, out_w - ow0));
      for (int64_t ph = 0; ph < stride; ++ph)
        for (int64_t c = 0; c < a.c; ++c) {
          float* row = dst + (kj * stride + ph) * s.copy + c * s.channel + ow0;
          const float* plane = x + c * a.h * in_w + start;  // + input row * in_w
          for (int64_t q = 0; q < s.rows; ++q) {
            const int64_t r = q * stride + ph;  // padded row
            __m512 v = zero;
            if (r >= top && r < bottom) {
              const float* src = plane + (r - top) * in_w;
              v = _mm512_maskz_loadu_ps(lo, src);
              if (stride == 2)
                v = _mm512_permutex2var_ps(v, even, _mm512_maskz_loadu_ps(hi, src + kLanes));
            }
            _mm512_mask_storeu_ps(row + q * out_w, store, v);
          }
        }
    }
}

// scratch(slot, count) at a 64-byte boundary: a vector load from a 16-byte aligned buffer (what
// the allocator gives) splits a cache line 3 times in 4.
float* aligned_scratch(int slot, int64_t count) {
  float* p = scratch<float>(slot, static_cast<size_t>(count + kLanes));
  const auto misaligned = reinterpret_cast<uintptr_t>(p) % 64;
  return misaligned == 0 ? p : p + (64 - misaligned) / sizeof(float);
}

// Weights of row blocks: packed[r0*depth + k*M + j] = src[(r0 + j)*row_step + k*depth_step],
// blocks of kRowsPerTile rows (the last one shorter), so a tile broadcasts M consecutive floats
// per step k.
void pack_rows(const float* src, int64_t rows, int64_t depth, int64_t row_step, int64_t depth_step,
               float* packed) {
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerTile) {
    const int64_t m = std::min<int64_t>(kRowsPerTile, rows - r0);
    for (int64_t k = 0; k < depth; ++k)
      for (int64_t j = 0; j < m; ++j)
        packed[r0 * depth + k * m + j] = src[(r0 + j) * row_step + k * depth_step];
  }
}

// out[j][p] = bias[j] + sum over k of a[k*M + j] * b[b_at[k] + p], for the tile's PV vectors of
// positions (the last one cut to `last` lanes): the forward (rows: output channels, k: taps, b:
// the shifted copy) and the backward data's columns (rows: taps, k: output channels, b: grad_out).
struct GemmTile {
  const float* b;       // the tile's first position in the k = 0 source (b_at[0] = 0 for it)
  const int64_t* b_at;  // offset of each k's source
  int64_t depth;        // k count
  const float* a;       // (depth, M) packed weights
  const float* bias;    // (M) or null
  float* out;           // row 0 at the tile's first position
  int64_t out_step;     // floats between rows of out
  unsigned last;        // lanes of the last vector
};

template <int M, int PV>
ECH_AVX512 void gemm_tile(const GemmTile& t) {
  __mmask16 mask[PV];
#pragma GCC unroll 4
  for (int v = 0; v < PV; ++v) mask[v] = static_cast<__mmask16>(v == PV - 1 ? t.last : 0xFFFFu);
  __m512 acc[M][PV];
#pragma GCC unroll 6
  for (int j = 0; j < M; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < PV; ++v) acc[j][v] = _mm512_setzero_ps();
  const float* b = t.b;
  const int64_t* b_at = t.b_at;
  const float* a = t.a;
  const int64_t depth = t.depth;  // locals: no reload from t after each store
  for (int64_t k = 0; k < depth; ++k) {
    const float* src = b + b_at[k];
    __m512 bv[PV];
#pragma GCC unroll 4
    for (int v = 0; v < PV; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], src + v * kLanes);
#pragma GCC unroll 6
    for (int j = 0; j < M; ++j) {
      const __m512 av = _mm512_set1_ps(a[k * M + j]);
#pragma GCC unroll 4
      for (int v = 0; v < PV; ++v) acc[j][v] = _mm512_fmadd_ps(av, bv[v], acc[j][v]);
    }
  }
  float* out = t.out;
  const int64_t out_step = t.out_step;
  const float* bias = t.bias;
#pragma GCC unroll 6
  for (int j = 0; j < M; ++j) {
    const __m512 bj = _mm512_set1_ps(bias ? bias[j] : 0.0f);
#pragma GCC unroll 4
    for (int v = 0; v < PV; ++v)
      _mm512_mask_storeu_ps(out + j * out_step + v * kLanes, mask[v], _mm512_add_ps(acc[j][v], bj));
  }
}

// The weight gradient's tile: acc[j][t] (16 lanes of partial sums) += grad_out of channel o0 + j
// times tap t0 + t of the shifted copy, over every position of `images` images; the lanes are
// summed once per call (conv_direct_backward_weight_avx512).
struct WeightTile {
  const float* gy;      // grad_out of channel o0, first image
  int64_t gy_image;     // floats between images of gy
  int64_t gy_channel;   // floats between channels (the plane)
  const float* xs;      // shifted copy of the first image
  int64_t xs_image;     // floats between images' copies
  const int64_t* taps;  // offsets of taps t0 ..
  int64_t images, vectors;
  unsigned last;        // lanes of the last vector of a plane
  float* acc;           // (channels, taps, 16) partial sums at (o0, t0)
  int64_t acc_channel;  // floats between channels of acc
};

template <int OT, int TT>
ECH_AVX512 void weight_tile(const WeightTile& w) {
  __m512 acc[OT][TT];
#pragma GCC unroll 8
  for (int j = 0; j < OT; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
      acc[j][t] = _mm512_loadu_ps(w.acc + j * w.acc_channel + t * kLanes);
  int64_t tap[TT];
#pragma GCC unroll 8
  for (int t = 0; t < TT; ++t) tap[t] = w.taps[t];
  for (int64_t i = 0; i < w.images; ++i) {
    const float* gy = w.gy + i * w.gy_image;
    const float* xs = w.xs + i * w.xs_image;
    for (int64_t v = 0; v < w.vectors; ++v) {
      const auto m = static_cast<__mmask16>(v == w.vectors - 1 ? w.last : 0xFFFFu);
      const int64_t p = v * kLanes;
      __m512 gv[OT];
#pragma GCC unroll 8
      for (int j = 0; j < OT; ++j) gv[j] = _mm512_maskz_loadu_ps(m, gy + j * w.gy_channel + p);
#pragma GCC unroll 8
      for (int t = 0; t < TT; ++t) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, xs + tap[t] + p);
#pragma GCC unroll 8
        for (int j = 0; j < OT; ++j) acc[j][t] = _mm512_fmadd_ps(gv[j], xv, acc[j][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < OT; ++j)
#pragma GCC unroll 8
    for (int t = 0; t < TT; ++t)
      _mm512_storeu_ps(w.acc + j * w.acc_channel + t * kLanes, acc[j][t]);
}

// Stores the lanes of v at p, or with accumulate p[i] + v[i].
ECH_AVX512 inline void store_or_add(float* p, __mmask16 lanes, __m512 v, bool accumulate) {
  if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(lanes, p), v);
  _mm512_mask_storeu_ps(p, lanes, v);
}

// grad_in (C, H, W) of one image from its columns (rows c*K*K + ki*K + kj of `ld` floats, the
// output positions): grad_in[c][ih][iw] = sum over ki, kj of column (c, ki, kj) at output
// (ih + pad - ki, iw + pad - kj) where that lies inside the output. One masked load per tap and
// 16 input columns; `cols` has kMargin readable floats before and after. With accumulate each
// element is grad_in + that sum (the autograd engine's gradient sum, in this store pass).
ECH_AVX512 void columns_to_image(const Conv2dGeometry& a, const float* cols, int64_t ld,
                                 bool accumulate, float* grad_in) {
  const int64_t k = a.kernel_w;
  __mmask16 lanes[kMaxWindow];  // per kj: the lanes whose output column lies inside the output
  int64_t at[kMaxWindow];       // per kj: the offset of lane 0 in a column's output row
  for (int64_t iw0 = 0; iw0 < a.w; iw0 += kLanes) {
    for (int64_t kj = 0; kj < k; ++kj) {
      const int64_t ow0 = iw0 + a.pad_w - kj;  // the output column of lane 0
      const int64_t hi = std::min({kLanes, a.out_w - ow0, a.w - iw0});
      lanes[kj] = static_cast<__mmask16>(lane_range(std::max<int64_t>(0, -ow0), hi));
      at[kj] = kj * ld + ow0;
    }
    const auto store = static_cast<__mmask16>(lane_range(0, a.w - iw0));
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t ih = 0; ih < a.h; ++ih) {
        __m512 sum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};  // two chains over ki
        for (int64_t ki = 0; ki < k; ++ki) {
          const int64_t oh = ih + a.pad_h - ki;
          if (oh < 0 || oh >= a.out_h) continue;
          const float* src = cols + (c * k + ki) * k * ld + oh * a.out_w;
          for (int64_t kj = 0; kj < k; ++kj)
            sum[ki & 1] =
                _mm512_add_ps(sum[ki & 1], _mm512_maskz_loadu_ps(lanes[kj], src + at[kj]));
        }
        store_or_add(grad_in + (c * a.h + ih) * a.w + iw0, store, _mm512_add_ps(sum[0], sum[1]),
                     accumulate);
      }
  }
}

// columns_to_image at stride 2: input column iw takes, for each kj, output column
// (iw + pad - kj) / 2 where that is a whole number inside the output, so for one kj every other
// lane of 16 input columns takes one, and those lanes' output columns are consecutive: one
// expanding load (lane i of the mask takes the next float) per tap and 16 input columns.
ECH_AVX512 void columns_to_image_stride2(const Conv2dGeometry& a, const float* cols, int64_t ld,
                                         bool accumulate, float* grad_in) {
  const int64_t k = a.kernel_w;
  __mmask16 lanes[kMaxWindow];  // per kj: the lanes that take an output column
  int64_t at[kMaxWindow];       // per kj: the offset of the first such lane's column in a row
  for (int64_t iw0 = 0; iw0 < a.w; iw0 += kLanes) {
    for (int64_t kj = 0; kj < k; ++kj) {
      unsigned mask = 0;
      at[kj] = 0;
      for (int64_t lane = std::min(kLanes, a.w - iw0) - 1; lane >= 0; --lane) {
        const int64_t twice = iw0 + lane + a.pad_w - kj;  // 2 * the output column
        if (twice < 0 || twice % 2 != 0 || twice / 2 >= a.out_w) continue;
        mask |= 1u << lane;
        at[kj] = kj * ld + twice / 2;  // the lowest lane's, once the loop ends
      }
      lanes[kj] = static_cast<__mmask16>(mask);
    }
    const auto store = static_cast<__mmask16>(lane_range(0, a.w - iw0));
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t ih = 0; ih < a.h; ++ih) {
        __m512 sum = _mm512_setzero_ps();
        for (int64_t ki = 0; ki < k; ++ki) {
          const int64_t twice = ih + a.pad_h - ki;  // 2 * the output row
          if (twice < 0 || twice % 2 != 0 || twice / 2 >= a.out_h) continue;
          const float* src = cols + (c * k + ki) * k * ld + twice / 2 * a.out_w;
          for (int64_t kj = 0; kj < k; ++kj)
            sum = _mm512_add_ps(sum, _mm512_maskz_expandloadu_ps(lanes[kj], src + at[kj]));
        }
        store_or_add(grad_in + (c * a.h + ih) * a.w + iw0, store, sum, accumulate);
      }
  }
}

ECH_AVX512 void sum_lanes(const float* partials, int64_t chunks, int64_t count, int64_t stride,
                          float* out) {
  for (int64_t i = 0; i < count; ++i) {
    __m512 v = _mm512_loadu_ps(partials + i * kLanes);
    for (int64_t chunk = 1; chunk < chunks; ++chunk)  // chunk by chunk: a fixed order
      v = _mm512_add_ps(v, _mm512_loadu_ps(partials + chunk * stride + i * kLanes));
    // Through memory, lane by lane (GCC 12's _mm512_reduce_add_ps warns in its own header).
    alignas(64) float lanes[kLanes];
    _mm512_store_ps(lanes, v);
    float sum = 0.0f;
    for (const float lane : lanes) sum += lane;
    out[i] = sum;
  }
}

using GemmTileFn = void (*)(const GemmTile&);
using WeightTileFn = void (*)(const WeightTile&);

template <int M>
GemmTileFn gemm_tile_vectors(int64_t vectors) {
  switch (vectors) {
    case 4:
      return gemm_tile<M, 4>;
    case 3:
      return gemm_tile<M, 3>;
    case 2:
      return gemm_tile<M, 2>;
    default:
      return gemm_tile<M, 1>;
  }
}

// gemm_tile for m (1..6) rows and `vectors` (1..4) position vectors.
GemmTileFn gemm_tile_for(int64_t m, int64_t vectors) {
  switch (m) {
    case 6:
      return gemm_tile_vectors<6>(vectors);
    case 5:
      return gemm_tile_vectors<5>(vectors);
    case 4:
      return gemm_tile_vectors<4>(vectors);
    case 3:
      return gemm_tile_vectors<3>(vectors);
    case 2:
      return gemm_tile_vectors<2>(vectors);
    default:
      return gemm_tile_vectors<1>(vectors);
  }
}

template <int OT>
WeightTileFn weight_tile_taps(int64_t taps) {
  switch (taps) {
    case 3:
      return weight_tile<OT, 3>;
    case 2:
      return weight_tile<OT, 2>;
    default:
      return weight_tile<OT, 1>;
  }
}

// weight_tile for `channels` (1..8) output channels and `taps` (1..3) taps.
WeightTileFn weight_tile_for(int64_t channels, int64_t taps) {
  switch (channels) {
    case 8:
      return weight_tile_taps<8>(taps);
    case 7:
      return weight_tile_taps<7>(taps);
    case 6:
      return weight_tile_taps<6>(taps);
    case 5:
      return weight_tile_taps<5>(taps);
    case 4:
      return weight_tile_taps<4>(taps);
    case 3:
      return weight_tile_taps<3>(taps);
    case 2:
      return weight_tile_taps<2>(taps);
    default:
      return weight_tile_taps<1>(taps);
  }
}

// Runs the tiles of out (rows, positions) = sum over depth: row blocks of kRowsPerTile (packed
// weights as pack_rows lays them out) times runs of kVectorsPerTile vectors.
void gemm_rows(GemmTile t, int64_t rows, int64_t positions, const float* packed,
               const float* bias) {
  const int64_t vectors = (positions + kLanes - 1) / kLanes;
  const unsigned tail = lane_range(0, positions - (vectors - 1) * kLanes);
  const float* b = t.b;
  float* out = t.out;
  for (int64_t v0 = 0; v0 < vectors; v0 += kVectorsPerTile) {
    const int64_t count = std::min<int64_t>(kVectorsPerTile, vectors - v0);
    t.last = v0 + count == vectors ? tail : 0xFFFFu;
    for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerTile) {
      const int64_t m = std::min<int64_t>(kRowsPerTile, rows - r0);
      t.b = b + v0 * kLanes;
      t.a = packed + r0 * t.depth;
      t.bias = bias ? bias + r0 : nullptr;
      t.out = out + r0 * t.out_step + v0 * kLanes;
      gemm_tile_for(m, count)(t);
    }
  }
}

}  // namespace

bool conv_direct_avx512_takes(const Conv2dGeometry& a) {
  const int64_t positions = a.out_h * a.out_w;
  const int64_t ld = (positions + kLanes - 1) / kLanes * kLanes;
  return a.stride_h == a.stride_w && (a.stride_h == 1 || a.stride_h == 2) && positions > 0 &&
         shifted_layout(a).image <= kShiftedBudget &&
         a.c * a.kernel_h * a.kernel_w * ld <= kColumnsBudget;
}

void conv_direct_forward_avx512(const Conv2dGeometry& a, const float* x, const float* w,
                                const float* bias, float* y) {
  const Shifted s = shifted_layout(a);
  const int64_t taps = a.c * a.kernel_h * a.kernel_w, positions = a.out_h * a.out_w;
  const std::vector<int64_t> taps_at = shifted_taps(a, s);
  // Slot 2 of the caller (the tasks only read it); w (O, taps) is rows o, depth t.
  float* packed = scratch<float>(2, static_cast<size_t>(a.o * taps));
  pack_rows(w, a.o, taps, taps, 1, packed);
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    float* shifted = aligned_scratch(0, s.image + kMargin);
    for (int64_t n = begin; n < end; ++n) {
      shift_image(a, s, x + n * a.c * a.h * a.w, shifted);
      GemmTile t{};
      t.b = shifted;
      t.b_at = taps_at.data();
      t.depth = taps;
      t.out = y + n * a.o * positions;
      t.out_step = positions;
      gemm_rows(t, a.o, positions, packed, bias);
    }
  });
}

void conv_direct_backward_input_avx512(const Conv2dGeometry& a, const float* grad_out,
                                       const float* w, float* grad_in, bool accumulate) {
  const int64_t rows = a.c * a.kernel_h * a.kernel_w, positions = a.out_h * a.out_w;
  const int64_t ld = (positions + kLanes - 1) / kLanes * kLanes;
  // Columns (rows, positions) = w^T (rows, O) x grad_out (O, positions): rows r, depth o.
  float* packed = scratch<float>(2, static_cast<size_t>(rows * a.o));
  pack_rows(w, rows, a.o, 1, rows, packed);
  std::vector<int64_t> planes_at(static_cast<size_t>(a.o));
  for (int64_t o = 0; o < a.o; ++o) planes_at[static_cast<size_t>(o)] = o * positions;
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    float* cols = aligned_scratch(0, rows * ld + 2 * kMargin);
    std::fill(cols, cols + kMargin, 0.0f);  // only masked-off lanes read the margins
    std::fill(cols + kMargin + rows * ld, cols + rows * ld + 2 * kMargin, 0.0f);
    for (int64_t n = begin; n < end; ++n) {
      GemmTile t{};
      t.b = grad_out + n * a.o * positions;
      t.b_at = planes_at.data();
      t.depth = a.o;
      t.out = cols + kMargin;
      t.out_step = ld;
      gemm_rows(t, rows, positions, packed, nullptr);
      (a.stride_h == 1 ? columns_to_image : columns_to_image_stride2)(
          a, cols + kMargin, ld, accumulate, grad_in + n * a.c * a.h * a.w);
    }
  });
}

void conv_direct_backward_weight_avx512(const Conv2dGeometry& a, const float* grad_out,
                                        const float* x, float* grad_w) {
  if (conv_direct_weight_outer_suits(a))
    return conv_direct_backward_weight_outer_avx512(a, grad_out, x, grad_w);
  const Shifted s = shifted_layout(a);
  const int64_t taps = a.c * a.kernel_h * a.kernel_w, positions = a.out_h * a.out_w;
  const int64_t vectors = (positions + kLanes - 1) / kLanes;
  const std::vector<int64_t> taps_at = shifted_taps(a, s);
  // A pass covers `group` images, whose grad_out planes stay in L1 over the tiles (a tile's taps
  // of the shifted copies are read once per channel block, right after each other).
  const int64_t group =
      std::max<int64_t>(1, kWeightGroupBudget / std::max<int64_t>(a.o * positions, 1));
  const int64_t chunks = chunk_count(a.n, 1), partial = a.o * taps * kLanes;
  // Per chunk (channel, tap, lane) sums in the caller's scratch (slot 1; tasks use slot 0).
  float* partials = aligned_scratch(1, std::max<int64_t>(chunks, 1) * partial);
  std::fill(partials, partials + partial, 0.0f);  // the only chunk read when there is none
  parallel_chunks(a.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    float* acc = partials + chunk * partial;
    std::fill(acc, acc + partial, 0.0f);
    float* shifted = aligned_scratch(0, group * s.image + kMargin);
    for (int64_t n = begin; n < end; n += group) {
      const int64_t images = std::min(group, end - n);
      for (int64_t i = 0; i < images; ++i)
        shift_image(a, s, x + (n + i) * a.c * a.h * a.w, shifted + i * s.image);
      WeightTile wt{};
      wt.gy_image = a.o * positions;
      wt.gy_channel = positions;
      wt.xs = shifted;
      wt.xs_image = s.image;
      wt.images = images;
      wt.vectors = vectors;
      wt.last = lane_range(0, positions - (vectors - 1) * kLanes);
      wt.acc_channel = taps * kLanes;
      for (int64_t t0 = 0; t0 < taps; t0 += kWeightTaps) {
        const int64_t count = std::min<int64_t>(kWeightTaps, taps - t0);
        wt.taps = taps_at.data() + t0;
        for (int64_t o0 = 0; o0 < a.o; o0 += kWeightChannels) {
          const int64_t channels = std::min<int64_t>(kWeightChannels, a.o - o0);
          wt.gy = grad_out + n * a.o * positions + o0 * positions;
          wt.acc = acc + (o0 * taps + t0) * kLanes;
          weight_tile_for(channels, count)(wt);
        }
      }
    }
  });
  sum_lanes(partials, chunks, a.o * taps, partial, grad_w);
}

#else  // not x86: never taken, conv_direct.cpp's AVX2 path or conv.cpp's im2col path runs

bool conv_direct_avx512_takes(const Conv2dGeometry&) {
  return false;
}
void conv_direct_forward_avx512(const Conv2dGeometry&, const float*, const float*, const float*,
                                float*) {
  ECH_CHECK(false, "conv_direct_forward_avx512: needs an x86 CPU with AVX-512");
}
void conv_direct_backward_input_avx512(const Conv2dGeometry&, const float*, const float*, float*,
                                       bool) {
  ECH_CHECK(false, "conv_direct_backward_input_avx512: needs an x86 CPU with AVX-512");
}
void conv_direct_backward_weight_avx512(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_backward_weight_avx512: needs an x86 CPU with AVX-512");
}

#endif

}  // namespace echelon::cpu::fast
