// The direct convolution (tensor/cpu/fast/conv_direct.h): the AVX2 kernels, and the dispatch to
// the AVX-512 ones (conv_direct_avx512.cpp). Only the register-tile functions are compiled for
// AVX2 + FMA (ECH_AVX2); everything around them (padding, offsets, threading) is portable code,
// and conv_direct_usable() keeps a CPU without AVX2 away from them.
#include <echelon/tensor/cpu/fast/conv_direct.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_direct_avx512.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace echelon::cpu::fast {

namespace {

bool cpu_has_avx512() {
#ifdef ECH_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

std::atomic<DirectIsa>& isa_setting() {
  static std::atomic<DirectIsa> isa{cpu_has_avx512() ? DirectIsa::Avx512 : DirectIsa::Avx2};
  return isa;
}

// True when the AVX-512 kernels run `a` (conv_direct_usable(a) holds).
bool wide(const Conv2dGeometry& a) {
  return isa_setting().load() == DirectIsa::Avx512 && conv_direct_avx512_takes(a);
}

}  // namespace

void set_conv_direct_isa(DirectIsa isa) {
  ECH_CHECK(isa != DirectIsa::Avx512 || cpu_has_avx512(),
            "set_conv_direct_isa: this CPU has no AVX-512");
  isa_setting().store(isa);
}

DirectIsa conv_direct_isa() {
  return isa_setting().load();
}

bool conv_direct_avx512_available() {
  return cpu_has_avx512();
}

void conv_direct_weight_by_chunks(
    const Conv2dGeometry& a, int64_t taps, int64_t op,
    const std::function<void(int64_t begin, int64_t end, float* acc)>& run, float* grad_w) {
  const int64_t chunks = chunk_count(a.n, 1), partial = taps * op;
  const size_t partial_count = static_cast<size_t>(std::max<int64_t>(chunks, 1) * partial);
  float* partials = scratch<float>(1, partial_count);
  std::fill(partials, partials + partial_count, 0.0f);
  parallel_chunks(a.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    run(begin, end, partials + chunk * partial);
  });
  for (int64_t o = 0; o < a.o; ++o)
    for (int64_t t = 0; t < taps; ++t) {
      float sum = 0.0f;  // chunk by chunk: a fixed order
      for (int64_t chunk = 0; chunk < chunks; ++chunk)
        sum += partials[chunk * partial + t * op + o];
      grad_w[o * taps + t] = sum;
    }
}

WeightPassShape conv_direct_weight_pass_shape(const Conv2dGeometry& a, int64_t positions) {
  const int64_t band = std::max<int64_t>(1, positions / std::max<int64_t>(a.out_w, 1));
  const int64_t group =
      band > a.out_h ? std::max<int64_t>(1, positions / std::max<int64_t>(a.out_h * a.out_w, 1))
                     : 1;
  return {band, group};
}

#ifdef ECH_AVX2
namespace {

constexpr int64_t kLanes = 8;         // floats per AVX register
constexpr int kTile = 4;              // forward: output vectors per register tile
constexpr int kBlock = 3;             // output channels per register tile (3 x 4 accumulators)
constexpr int64_t kWeightTaps = 6;    // backward weight: taps per register tile (x 2 vectors)
constexpr int64_t kWeightBand = 256;  // backward weight: output positions per pass over the taps
constexpr int64_t kMaxWindow = 5;     // the largest K the kernels take

// Output channels in the register tile starting at o0: 3, except 2 + 2 for a remainder of 4 (a
// 1-channel tile does a third of the work per input load).
int64_t block_at(int64_t o, int64_t o0) {
  return o - o0 == 4 ? 2 : std::min<int64_t>(kBlock, o - o0);
}

// The padded copy of one image (K x K window, padding P): phase ph (the column parity at stride
// 2; one phase at stride 1), channel c, padded row r, column q holds x[c][r - P][ph + stride*q -
// P], zero outside the image. A row is long enough for every vector a kernel loads from it, so
// loads never leave their row.
struct Padded {
  int64_t k, pad, stride, row, plane, phase, image;  // window, padding, element strides
};

Padded padded_layout(const Conv2dGeometry& a) {
  Padded p{};
  p.k = a.kernel_w;
  p.pad = a.pad_w;
  p.stride = a.stride_w;
  const int64_t vector_columns = (a.out_w + kLanes - 1) / kLanes * kLanes;
  p.row =
      std::max((a.w + 2 * p.pad + p.stride - 1) / p.stride, vector_columns + (p.k - 1) / p.stride);
  p.plane = (a.h + 2 * p.pad) * p.row;
  p.phase = a.c * p.plane;
  p.image = p.stride * p.phase;
  return p;
}

void pad_image(const Conv2dGeometry& a, const Padded& p, const float* x /* (C, H, W) */,
               float* dst) {
  std::fill(dst, dst + p.image, 0.0f);
  for (int64_t ph = 0; ph < p.stride; ++ph)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t r = 0; r < a.h; ++r) {
        const float* src = x + (c * a.h + r) * a.w;
        float* row = dst + ph * p.phase + c * p.plane + (r + p.pad) * p.row;
        if (p.stride == 1) {
          std::memcpy(row + p.pad, src, sizeof(float) * static_cast<size_t>(a.w));
          continue;
        }
        // The first q whose column ph + stride*q - pad is inside the image (not left padding).
        const int64_t first = ph >= p.pad ? 0 : (p.pad - ph + p.stride - 1) / p.stride;
        for (int64_t q = first, col = ph + p.stride * first - p.pad; col < a.w;
             ++q, col += p.stride)
          row[q] = src[col];
      }
}

// Offset of tap (c, ki, kj) in the padded image, relative to an output vector's offset.
std::vector<int64_t> tap_offsets(const Conv2dGeometry& a, const Padded& p) {
  std::vector<int64_t> at(static_cast<size_t>(a.c * p.k * p.k));
  for (int64_t c = 0; c < a.c; ++c)
    for (int64_t ki = 0; ki < p.k; ++ki)
      for (int64_t kj = 0; kj < p.k; ++kj)
        at[static_cast<size_t>((c * p.k + ki) * p.k + kj)] =
            (kj % p.stride) * p.phase + c * p.plane + ki * p.row + kj / p.stride;
  return at;
}

// One output vector: 8 (or `lanes` < 8 at a row's end) consecutive columns of one output row.
struct OutVector {
  int64_t in;   // offset of its tap (0, 0, 0) in the padded image(s)
  int64_t out;  // offset in the output plane
  int lanes;    // 0: a filler that completes the last tile, never stored
};

OutVector out_vector(const Conv2dGeometry& a, const Padded& p, int64_t index) {
  const int64_t per_row = (a.out_w + kLanes - 1) / kLanes;
  const int64_t oh = index / per_row, ow = index % per_row * kLanes;
  return {oh * p.stride * p.row + ow, oh * a.out_w + ow,
          static_cast<int>(std::min(kLanes, a.out_w - ow))};
}

// y[j] (plane of output channel o0 + j) at the tile's vectors = bias[j] + sum over taps t of
// wp[t*B + j] * in[tap t of the vector]; the 4B accumulators stay in registers over all taps.
template <int B>
ECH_AVX2 void forward_tile(const float* in, const OutVector* tile, const int64_t* taps_at,
                           int64_t taps, const float* wp, const float* bias, float* y,
                           int64_t out_plane) {
  __m256 acc[B][kTile];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < kTile; ++v) acc[j][v] = _mm256_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    // Weights first, then one input vector at a time: 12 accumulators + 3 weights + 1 input
    // fill the 16 registers exactly (all inputs first would spill an accumulator every tap).
    const float* tap = in + taps_at[t];
    __m256 wv[B];
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) wv[j] = _mm256_broadcast_ss(wp + t * B + j);
#pragma GCC unroll 8
    for (int v = 0; v < kTile; ++v) {
      const __m256 xv = _mm256_loadu_ps(tap + tile[v].in);
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j) acc[j][v] = _mm256_fmadd_ps(wv[j], xv, acc[j][v]);
    }
  }
  // Through a local buffer: a lane-dependent store of acc itself would keep acc in memory (GCC
  // then stores every accumulator on every tap).
  alignas(32) float sums[B][kTile][kLanes];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 8
    for (int v = 0; v < kTile; ++v) _mm256_store_ps(sums[j][v], acc[j][v]);
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j) {
    const float b = bias ? bias[j] : 0.0f;
#pragma GCC unroll 8
    for (int v = 0; v < kTile; ++v) {
      float* dst = y + j * out_plane + tile[v].out;
      for (int lane = 0; lane < tile[v].lanes; ++lane) dst[lane] = sums[j][v][lane] + b;
    }
  }
}

// The weight gradient as outer products: for each output position, acc[t][v] (tap t; output
// channels o0 + 8v .. o0 + 8v + 7 in the lanes) += x at tap t of the position (a broadcast) *
// grad_out of those channels at the position (one load from the position-major copy `gt`). The
// T x V accumulators stay in registers over a band of output rows (T = 6, V = 2: 12 FMAs per 2
// loads and 6 broadcasts, none of which splits a cache line), and no lane sum is left to do.
// One pass of the weight tile: `images` padded images `image_step` apart, `rows` output rows of
// each (row r at r * row_step in the padded image), out_w columns; gt_stride floats between the
// positions of gt, acc_stride between the taps of the accumulators.
struct WeightPass {
  int64_t images, image_step, rows, out_w, row_step, gt_stride, acc_stride;
};

template <int T, int V, int S>
ECH_AVX2 void weight_outer_tile(const float* padded, const int64_t* taps_at, const float* gt,
                                const WeightPass& pass, float* acc_at) {
  const int64_t out_w = pass.out_w, gt_stride = pass.gt_stride, acc_stride = pass.acc_stride;
  __m256 acc[T][V];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[t][v] = _mm256_loadu_ps(acc_at + t * acc_stride + v * kLanes);
  const float* tap[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) tap[t] = padded + taps_at[t];
  const float* g = gt;  // the images' positions follow each other in gt
  for (int64_t image = 0; image < pass.images; ++image)
    for (int64_t oh = 0; oh < pass.rows; ++oh, g += out_w * gt_stride) {
      const int64_t row = image * pass.image_step + oh * pass.row_step;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        __m256 gv[V];
#pragma GCC unroll 8
        for (int v = 0; v < V; ++v) gv[v] = _mm256_loadu_ps(g + ow * gt_stride + v * kLanes);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          const __m256 xv = _mm256_broadcast_ss(tap[t] + row + ow * S);
#pragma GCC unroll 8
          for (int v = 0; v < V; ++v) acc[t][v] = _mm256_fmadd_ps(xv, gv[v], acc[t][v]);
        }
      }
    }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc_at + t * acc_stride + v * kLanes, acc[t][v]);
}

void forward_impl(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                  float* y) {
  const Padded p = padded_layout(a);
  const int64_t taps = a.c * p.k * p.k, out_plane = a.out_h * a.out_w;
  const std::vector<int64_t> taps_at = tap_offsets(a, p);
  // Weights per block of B output channels, tap-major: wp[o0*taps + t*B + j] = w[o0 + j][t].
  // In the caller's scratch (slot 2): the pool's tasks only read it, and a fresh vector of this
  // size would be a fresh mmap (page faults) on every call.
  float* wp = scratch<float>(2, static_cast<size_t>(a.o * taps));
  for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
    b = block_at(a.o, o0);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t j = 0; j < b; ++j) wp[o0 * taps + t * b + j] = w[(o0 + j) * taps + t];
  }
  const int64_t per_row = (a.out_w + kLanes - 1) / kLanes, vectors = a.out_h * per_row;
  parallel_for(a.n, 1, [&](int64_t begin, int64_t end) {
    float* padded = scratch<float>(0, static_cast<size_t>(p.image));
    for (int64_t n = begin; n < end; ++n) {
      pad_image(a, p, x + n * a.c * a.h * a.w, padded);
      for (int64_t v0 = 0; v0 < vectors; v0 += kTile) {
        OutVector tile[kTile];
        for (int v = 0; v < kTile; ++v)
          tile[v] = v0 + v < vectors ? out_vector(a, p, v0 + v) : OutVector{0, 0, 0};
        for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
          b = block_at(a.o, o0);
          const float* wb = wp + o0 * taps;
          const float* bb = bias ? bias + o0 : nullptr;
          float* yb = y + (n * a.o + o0) * out_plane;
          switch (b) {
            case 3:
              forward_tile<3>(padded, tile, taps_at.data(), taps, wb, bb, yb, out_plane);
              break;
            case 2:
              forward_tile<2>(padded, tile, taps_at.data(), taps, wb, bb, yb, out_plane);
              break;
            default:
              forward_tile<1>(padded, tile, taps_at.data(), taps, wb, bb, yb, out_plane);
          }
        }
      }
    }
  });
}

using WeightTileFn = void (*)(const float*, const int64_t*, const float*, const WeightPass&,
                              float*);

template <int V, int S>
WeightTileFn weight_tile_for_taps(int64_t taps) {
  switch (taps) {
    case 6:
      return weight_outer_tile<6, V, S>;
    case 5:
      return weight_outer_tile<5, V, S>;
    case 4:
      return weight_outer_tile<4, V, S>;
    case 3:
      return weight_outer_tile<3, V, S>;
    case 2:
      return weight_outer_tile<2, V, S>;
    default:
      return weight_outer_tile<1, V, S>;
  }
}

// weight_outer_tile for `taps` <= kWeightTaps taps, `vectors` (1, 2) of 8 channels, stride 1 or 2.
WeightTileFn weight_tile_for(int64_t taps, int64_t vectors, int64_t stride) {
  if (vectors == 2)
    return stride == 1 ? weight_tile_for_taps<2, 1>(taps) : weight_tile_for_taps<2, 2>(taps);
  return stride == 1 ? weight_tile_for_taps<1, 1>(taps) : weight_tile_for_taps<1, 2>(taps);
}

// dst[j*ld_dst + i] = src[i*ld_src + j] for an 8 x 8 block: three rounds of shuffles.
ECH_AVX2 void transpose_8x8(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // rows i, i+1 interleaved: columns 0 1 4 5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // columns 2 3 6 7
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));          // column 0 (and 4)
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));      // column 1 (5)
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));  // 2 (6)
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));  // 3 (7)
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    _mm256_storeu_ps(dst + j * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ld_dst, _mm256_permute2f128_ps(r[j], r[j + 4], 0x31));
  }
}

}  // namespace

void conv_direct_transpose_planes(const float* grad_out, int64_t o, int64_t positions, int64_t op,
                                  float* gt) {
  const int64_t whole_o = o / kLanes * kLanes, whole_p = positions / kLanes * kLanes;
  for (int64_t k = 0; k < whole_o; k += kLanes) {
    for (int64_t q = 0; q < whole_p; q += kLanes)
      transpose_8x8(grad_out + k * positions + q, positions, gt + q * op + k, op);
    for (int64_t q = whole_p; q < positions; ++q)
      for (int64_t j = k; j < k + kLanes; ++j) gt[q * op + j] = grad_out[j * positions + q];
  }
  for (int64_t q = 0; q < positions; ++q) {
    for (int64_t j = whole_o; j < o; ++j) gt[q * op + j] = grad_out[j * positions + q];
    std::fill(gt + q * op + o, gt + (q + 1) * op, 0.0f);
  }
}

bool conv_direct_usable(const Conv2dGeometry& a) {
  static const bool cpu_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // 3..5: a 1x1 or 2x2 window has too few taps per loaded tile; im2col + GEMM does better there.
  return cpu_has_avx2 && a.kernel_h == a.kernel_w && a.kernel_w >= 3 && a.kernel_w <= kMaxWindow &&
         a.pad_h == a.pad_w && a.pad_w >= 0 && a.pad_w < a.kernel_w && a.dilation_h == 1 &&
         a.dilation_w == 1 && a.stride_h == a.stride_w && (a.stride_h == 1 || a.stride_h == 2);
}

void conv_direct_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                         float* y) {
  if (wide(a)) return conv_direct_forward_avx512(a, x, w, bias, y);
  forward_impl(a, x, w, bias, y);
}

bool conv_direct_backward_input_usable(const Conv2dGeometry& a) {
  return a.stride_h == 1 || wide(a);
}

bool conv_direct_backward_input_adds(const Conv2dGeometry& a) {
  return conv_direct_usable(a) && wide(a);
}

void conv_direct_backward_input_add(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                    float* grad_in) {
  ECH_CHECK(conv_direct_backward_input_adds(a),
            "conv_direct_backward_input_add: adding into grad_in needs the AVX-512 kernel");
  conv_direct_backward_input_avx512(a, grad_out, w, grad_in, /*accumulate=*/true);
}

void conv_direct_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                float* grad_in) {
  if (wide(a)) return conv_direct_backward_input_avx512(a, grad_out, w, grad_in);
  ECH_CHECK(a.stride_h == 1 && a.stride_w == 1, "conv_direct_backward_input: stride ", a.stride_h,
            " given, the AVX2 kernel takes stride 1 only");
  // grad_in = grad_out (N, O, OH, OW) convolved, padding K-1-pad, with w transposed to
  // (C, O, K, K) and turned by 180 degrees: the forward kernel with the roles of C and O swapped.
  const int64_t window = a.kernel_h * a.kernel_w;
  float* flipped = scratch<float>(3, static_cast<size_t>(a.o * a.c * window));  // not slot 0 or 2
  for (int64_t o = 0; o < a.o; ++o)
    for (int64_t c = 0; c < a.c; ++c)
      for (int64_t t = 0; t < window; ++t)
        flipped[(c * a.o + o) * window + (window - 1 - t)] = w[(o * a.c + c) * window + t];
  Conv2dGeometry transposed;
  transposed.kernel_h = transposed.kernel_w = a.kernel_w;
  transposed.pad_h = transposed.pad_w = a.kernel_w - 1 - a.pad_w;
  forward_impl(transposed.for_input(a.n, a.o, a.out_h, a.out_w, a.c), grad_out, flipped, nullptr,
               grad_in);
}

void conv_direct_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                 float* grad_w) {
  if (wide(a)) return conv_direct_backward_weight_avx512(a, grad_out, x, grad_w);
  // The padded image in one phase (plain rows: broadcasts need no contiguous columns).
  Padded p{};
  p.k = a.kernel_w;
  p.pad = a.pad_w;
  p.stride = 1;
  p.row = a.w + 2 * p.pad;
  p.plane = (a.h + 2 * p.pad) * p.row;
  p.phase = p.image = a.c * p.plane;
  const int64_t taps = a.c * p.k * p.k, positions = a.out_h * a.out_w;
  const int64_t op = (a.o + kLanes - 1) / kLanes * kLanes;  // channels rounded up to vectors
  std::vector<int64_t> taps_at(static_cast<size_t>(taps));
  for (int64_t c = 0; c < a.c; ++c)
    for (int64_t ki = 0; ki < p.k; ++ki)
      for (int64_t kj = 0; kj < p.k; ++kj)
        taps_at[static_cast<size_t>((c * p.k + ki) * p.k + kj)] = c * p.plane + ki * p.row + kj;
  const WeightPassShape shape = conv_direct_weight_pass_shape(a, kWeightBand);
  const int64_t band = shape.band, group = shape.group;
  auto run = [&](int64_t begin, int64_t end, float* acc) {
    const size_t per_image = static_cast<size_t>(p.image + positions * op);
    float* padded = scratch<float>(0, static_cast<size_t>(group) * per_image);
    float* gt = padded + group * p.image;
    for (int64_t n = begin; n < end; n += group) {
      const int64_t images = std::min(group, end - n);
      for (int64_t i = 0; i < images; ++i) {
        pad_image(a, p, x + (n + i) * a.c * a.h * a.w, padded + i * p.image);
        conv_direct_transpose_planes(grad_out + (n + i) * a.o * positions, a.o, positions, op,
                                     gt + i * positions * op);
      }
      for (int64_t row0 = 0; row0 < a.out_h; row0 += band) {
        const WeightPass pass{
            images, p.image, std::min(band, a.out_h - row0), a.out_w, a.stride_h * p.row, op, op};
        const float* in = padded + row0 * pass.row_step;
        const float* g = gt + row0 * a.out_w * op;
        for (int64_t o0 = 0; o0 < op; o0 += 2 * kLanes) {
          const int64_t vectors = std::min<int64_t>(2, (op - o0) / kLanes);
          for (int64_t t0 = 0; t0 < taps; t0 += kWeightTaps) {
            const int64_t count = std::min(kWeightTaps, taps - t0);
            weight_tile_for(count, vectors, a.stride_w)(in, taps_at.data() + t0, g + o0, pass,
                                                        acc + t0 * op + o0);
          }
        }
      }
    }
  };
  conv_direct_weight_by_chunks(a, taps, op, run, grad_w);
}

#else  // not x86: the direct kernels are never usable, conv.cpp's im2col path runs instead

bool conv_direct_usable(const Conv2dGeometry&) {
  return false;
}

void conv_direct_forward(const Conv2dGeometry&, const float*, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_forward: the direct kernel needs an x86 CPU with AVX2");
}
void conv_direct_backward_input(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_backward_input: the direct kernel needs an x86 CPU with AVX2");
}
bool conv_direct_backward_input_adds(const Conv2dGeometry&) {
  return false;
}
void conv_direct_backward_input_add(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_backward_input_add: the direct kernel needs an x86 CPU with AVX2");
}
void conv_direct_backward_weight(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_backward_weight: the direct kernel needs an x86 CPU with AVX2");
}
void conv_direct_transpose_planes(const float*, int64_t, int64_t, int64_t, float*) {
  ECH_CHECK(false, "conv_direct_transpose_planes: needs an x86 CPU with AVX2");
}

#endif

}  // namespace echelon::cpu::fast
