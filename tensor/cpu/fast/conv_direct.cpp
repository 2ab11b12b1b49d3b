// The direct convolution (tensor/cpu/fast/conv_direct.h). Only the register-tile functions are
// compiled for AVX2 + FMA (ECH_AVX2); everything around them (padding, offsets, threading) is
// portable code, and conv_direct_usable() keeps a CPU without AVX2 away from them.
#include <echelon/tensor/cpu/fast/conv_direct.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace echelon::cpu::fast {

#ifdef ECH_AVX2
namespace {

constexpr int64_t kLanes = 8;       // floats per AVX register
constexpr int kTile = 4;            // forward: output vectors per register tile
constexpr int kBlock = 3;           // output channels per register tile (3 x 4 accumulators)
constexpr int64_t kWeightRun = 32;  // backward weight: position vectors per pass over the taps
constexpr int kWeightColumns = 3;   // backward weight: window columns per register tile
constexpr int64_t kMaxWindow = 5;   // the largest K the kernels take

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
  int64_t out;  // offset in the output plane (forward) or in grad_out (backward weight)
  int lanes;    // 0: a filler that completes the last tile, never stored
};

OutVector out_vector(const Conv2dGeometry& a, const Padded& p, int64_t index) {
  const int64_t per_row = (a.out_w + kLanes - 1) / kLanes;
  const int64_t oh = index / per_row, ow = index % per_row * kLanes;
  return {oh * p.stride * p.row + ow, oh * a.out_w + ow,
          static_cast<int>(std::min(kLanes, a.out_w - ow))};
}

ECH_AVX2 __m256i lane_mask(int lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
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

// gv[(j*taps + kj)*8 + lane] += grad_out[o0 + j] * in[tap (c, ki, kj0 + kj)] over the run's
// vectors, kj < J: lane-wise partial sums of B x J weight-gradient entries, reduced across lanes
// at the end.
template <int B, int J>
ECH_AVX2 void weight_tile(const float* in, const OutVector* run, int64_t count,
                          const int64_t* taps_at, const float* grad_out, int64_t out_plane,
                          int64_t taps, float* gv) {
  __m256 acc[B][J];
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 8
    for (int kj = 0; kj < J; ++kj) acc[j][kj] = _mm256_loadu_ps(gv + (j * taps + kj) * kLanes);
  for (int64_t e = 0; e < count; ++e) {
    const OutVector& vec = run[e];
    __m256 g[B];
    if (vec.lanes == kLanes) {  // a whole vector (all of ResNet's): no masking
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j) g[j] = _mm256_loadu_ps(grad_out + j * out_plane + vec.out);
#pragma GCC unroll 8
      for (int kj = 0; kj < J; ++kj) {
        const __m256 xv = _mm256_loadu_ps(in + vec.in + taps_at[kj]);
#pragma GCC unroll 8
        for (int j = 0; j < B; ++j) acc[j][kj] = _mm256_fmadd_ps(g[j], xv, acc[j][kj]);
      }
      continue;
    }
    // Lanes past the row's end: gradient and input read as zero (an input there may be the next
    // column's Inf, and 0 * Inf would put a NaN into a tap that never reads it).
    const __m256i mask = lane_mask(vec.lanes);
    const __m256 keep = _mm256_castsi256_ps(mask);
#pragma GCC unroll 8
    for (int j = 0; j < B; ++j) g[j] = _mm256_maskload_ps(grad_out + j * out_plane + vec.out, mask);
#pragma GCC unroll 8
    for (int kj = 0; kj < J; ++kj) {
      const __m256 xv = _mm256_and_ps(_mm256_loadu_ps(in + vec.in + taps_at[kj]), keep);
#pragma GCC unroll 8
      for (int j = 0; j < B; ++j) acc[j][kj] = _mm256_fmadd_ps(g[j], xv, acc[j][kj]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < B; ++j)
#pragma GCC unroll 8
    for (int kj = 0; kj < J; ++kj) _mm256_storeu_ps(gv + (j * taps + kj) * kLanes, acc[j][kj]);
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

// weight_tile<b, columns> for b <= kBlock output channels and columns <= kWeightColumns.
template <int B>
void weight_tile_columns(int64_t columns, const float* in, const OutVector* run, int64_t count,
                         const int64_t* taps_at, const float* grad_out, int64_t out_plane,
                         int64_t taps, float* gv) {
  switch (columns) {
    case 3:
      return weight_tile<B, 3>(in, run, count, taps_at, grad_out, out_plane, taps, gv);
    case 2:
      return weight_tile<B, 2>(in, run, count, taps_at, grad_out, out_plane, taps, gv);
    default:
      return weight_tile<B, 1>(in, run, count, taps_at, grad_out, out_plane, taps, gv);
  }
}

void weight_block(int64_t b, int64_t columns, const float* in, const OutVector* run, int64_t count,
                  const int64_t* taps_at, const float* grad_out, int64_t out_plane, int64_t taps,
                  float* gv) {
  switch (b) {
    case 3:
      return weight_tile_columns<3>(columns, in, run, count, taps_at, grad_out, out_plane, taps,
                                    gv);
    case 2:
      return weight_tile_columns<2>(columns, in, run, count, taps_at, grad_out, out_plane, taps,
                                    gv);
    default:
      return weight_tile_columns<1>(columns, in, run, count, taps_at, grad_out, out_plane, taps,
                                    gv);
  }
}

}  // namespace

bool conv_direct_usable(const Conv2dGeometry& a) {
  static const bool cpu_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  // 3..5: a 1x1 or 2x2 window has too few taps per loaded tile; im2col + GEMM does better there.
  return cpu_has_avx2 && a.kernel_h == a.kernel_w && a.kernel_w >= 3 && a.kernel_w <= kMaxWindow &&
         a.pad_h == a.pad_w && a.pad_w >= 0 && a.pad_w < a.kernel_w && a.dilation_h == 1 &&
         a.dilation_w == 1 && a.stride_h == a.stride_w && (a.stride_h == 1 || a.stride_h == 2);
}

void conv_direct_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                         float* y) {
  forward_impl(a, x, w, bias, y);
}

void conv_direct_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                float* grad_in) {
  ECH_CHECK(a.stride_h == 1 && a.stride_w == 1, "conv_direct_backward_input: stride ", a.stride_h,
            " given, the direct kernel takes stride 1 only");
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
  const Padded p = padded_layout(a);
  const int64_t taps = a.c * p.k * p.k, out_plane = a.out_h * a.out_w, weights = a.o * taps;
  const std::vector<int64_t> taps_at = tap_offsets(a, p);
  const int64_t per_row = (a.out_w + kLanes - 1) / kLanes, vectors = a.out_h * per_row;
  // A run: whole small images together, or rows of a large one, about kWeightRun vectors.
  const int64_t images_per_run = std::max<int64_t>(1, kWeightRun / std::max<int64_t>(vectors, 1));
  const int64_t rows_per_run =
      images_per_run > 1 ? a.out_h : std::max<int64_t>(1, kWeightRun / per_row);
  const int64_t chunks = chunk_count(a.n, 1);
  // The caller's scratch (slot 1; the tasks pad images into their own slot 0), zeroed here.
  const size_t partial_count = static_cast<size_t>(std::max<int64_t>(chunks, 1) * weights * kLanes);
  float* partials = scratch<float>(1, partial_count);
  std::fill(partials, partials + partial_count, 0.0f);
  parallel_chunks(a.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    float* gv = partials + chunk * weights * kLanes;
    std::vector<OutVector> run;
    for (int64_t n = begin; n < end; n += images_per_run) {
      const int64_t count = std::min(images_per_run, end - n);
      float* padded = scratch<float>(0, static_cast<size_t>(count * p.image));
      for (int64_t i = 0; i < count; ++i)
        pad_image(a, p, x + (n + i) * a.c * a.h * a.w, padded + i * p.image);
      for (int64_t row0 = 0; row0 < a.out_h; row0 += rows_per_run) {
        const int64_t row1 = std::min(a.out_h, row0 + rows_per_run);
        run.clear();
        for (int64_t i = 0; i < count; ++i)
          for (int64_t v = row0 * per_row; v < row1 * per_row; ++v) {
            OutVector vec = out_vector(a, p, v);
            vec.in += i * p.image;
            vec.out += (n + i) * a.o * out_plane;
            run.push_back(vec);
          }
        const auto length = static_cast<int64_t>(run.size());
        for (int64_t o0 = 0, b = 0; o0 < a.o; o0 += b) {
          b = block_at(a.o, o0);
          for (int64_t c = 0; c < a.c; ++c)
            for (int64_t ki = 0; ki < p.k; ++ki)
              for (int64_t kj = 0; kj < p.k; kj += kWeightColumns) {
                const int64_t t = (c * p.k + ki) * p.k + kj;
                weight_block(b, std::min<int64_t>(kWeightColumns, p.k - kj), padded, run.data(),
                             length, taps_at.data() + t, grad_out + o0 * out_plane, out_plane, taps,
                             gv + (o0 * taps + t) * kLanes);
              }
        }
      }
    }
  });
  for (int64_t k = 0; k < weights; ++k) {
    float sum = 0.0f;  // chunk by chunk, lane by lane: a fixed order
    for (int64_t chunk = 0; chunk < chunks; ++chunk)
      for (int64_t lane = 0; lane < kLanes; ++lane)
        sum += partials[(chunk * weights + k) * kLanes + lane];
    grad_w[k] = sum;
  }
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
void conv_direct_backward_weight(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_direct_backward_weight: the direct kernel needs an x86 CPU with AVX2");
}

#endif

}  // namespace echelon::cpu::fast
