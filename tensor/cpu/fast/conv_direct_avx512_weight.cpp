// The AVX-512 weight gradient with the output channels in the lanes (conv_direct_avx512.h), for
// layers with 16 output channels or a multiple: for each output position, acc[tap] (16 channels)
// += x at the tap (a broadcast) * grad_out of the 16 channels at the position (one load from a
// position-major copy of grad_out). A register tile holds R rows (c, ki) x K taps kj, so its
// broadcasts are R row pointers plus constant offsets; the positions' gradients and the padded
// images of a pass (about kBand positions) stay in L1 over all tiles.
#include <echelon/tensor/cpu/fast/conv_direct_avx512.h>

#include <algorithm>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ECH_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace echelon::cpu::fast {

#ifdef ECH_AVX512
namespace {

constexpr int64_t kLanes = 16;  // output channels per register
constexpr int64_t kBand = 256;  // output positions per pass over the taps
constexpr int kTileTaps = 20;   // at most R x K accumulators per tile

// One pass of the tile: `images` padded images `image_step` apart, out_h x out_w positions each
// (output position (oh, ow) reads padded row oh * stride + ki, column ow * stride + kj; `row`
// is the padded row length times the stride); gt holds the positions' 16-channel gradients
// `gt_step` floats apart, acc the (tap, channel) sums `acc_step` floats apart.
struct OuterPass {
  int64_t images, image_step, out_h, out_w, row, stride, gt_step, acc_step;
};

template <int K, int R>
ECH_AVX512 void outer_tile(const float* padded, const int64_t* rows_at, const float* gt,
                           const OuterPass& p, float* acc_at) {
  __m512 acc[R][K];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int kj = 0; kj < K; ++kj) acc[r][kj] = _mm512_loadu_ps(acc_at + (r * K + kj) * p.acc_step);
  const float* base[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) base[r] = padded + rows_at[r];
  const int64_t out_w = p.out_w, gt_step = p.gt_step, stride = p.stride;
  const float* g = gt;
  for (int64_t image = 0; image < p.images; ++image)
    for (int64_t oh = 0; oh < p.out_h; ++oh, g += out_w * gt_step) {
      const int64_t row = image * p.image_step + oh * p.row;
      for (int64_t ow = 0; ow < out_w; ++ow) {
        const __m512 gv = _mm512_loadu_ps(g + ow * gt_step);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const float* src = base[r] + row + ow * stride;
#pragma GCC unroll 8
          for (int kj = 0; kj < K; ++kj)
            acc[r][kj] = _mm512_fmadd_ps(_mm512_set1_ps(src[kj]), gv, acc[r][kj]);
        }
      }
    }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int kj = 0; kj < K; ++kj) _mm512_storeu_ps(acc_at + (r * K + kj) * p.acc_step, acc[r][kj]);
}

using OuterTileFn = void (*)(const float*, const int64_t*, const float*, const OuterPass&, float*);

template <int K>
OuterTileFn outer_tile_rows(int64_t rows) {
  switch (rows) {
    case 6:
      if constexpr (6 * K <= kTileTaps) return outer_tile<K, 6>;
      [[fallthrough]];
    case 5:
      if constexpr (5 * K <= kTileTaps) return outer_tile<K, 5>;
      [[fallthrough]];
    case 4:
      return outer_tile<K, 4>;
    case 3:
      return outer_tile<K, 3>;
    case 2:
      return outer_tile<K, 2>;
    default:
      return outer_tile<K, 1>;
  }
}

// outer_tile for window K (3..5) and `rows` (1 .. kTileTaps / K) rows of K taps.
OuterTileFn outer_tile_for(int64_t k, int64_t rows) {
  switch (k) {
    case 5:
      return outer_tile_rows<5>(rows);
    case 4:
      return outer_tile_rows<4>(rows);
    default:
      return outer_tile_rows<3>(rows);
  }
}

}  // namespace

bool conv_direct_weight_outer_suits(const Conv2dGeometry& a) {
  // Every lane a channel. With one input channel a tile has only K rows (c, ki) of K taps, too
  // few accumulators for its broadcasts; the positions-in-lanes tiles then run 1.6x faster
  // (ResNet's 1 -> 16 stem on 32x32 images: 1.2-1.5 against 1.9-2.3 ms per 128 images; at 3 input
  // channels the two were even, at 6 and more this one led by 1.3-2.3x).
  return a.o % kLanes == 0 && a.c > 1;
}

void conv_direct_backward_weight_outer_avx512(const Conv2dGeometry& a, const float* grad_out,
                                              const float* x, float* grad_w) {
  const int64_t k = a.kernel_w, pad = a.pad_w, row = a.w + 2 * pad, stride = a.stride_w;
  const int64_t plane = (a.h + 2 * pad) * row, image = a.c * plane + kLanes;  // + read margin
  const int64_t window_rows = a.c * k, taps = window_rows * k, positions = a.out_h * a.out_w;
  const int64_t op = a.o;  // a multiple of 16 (conv_direct_weight_outer_suits)
  const int64_t tile_rows = kTileTaps / k;
  std::vector<int64_t> rows_at(static_cast<size_t>(window_rows));  // row (c, ki) in the image
  for (int64_t c = 0; c < a.c; ++c)
    for (int64_t ki = 0; ki < k; ++ki)
      rows_at[static_cast<size_t>(c * k + ki)] = c * plane + ki * row;
  const WeightPassShape shape = conv_direct_weight_pass_shape(a, kBand);
  const int64_t band = shape.band, group = shape.group;
  auto run = [&](int64_t begin, int64_t end, float* acc) {
    float* padded = scratch<float>(0, static_cast<size_t>(group * (image + positions * op)));
    float* gt = padded + group * image;
    for (int64_t n = begin; n < end; n += group) {
      const int64_t images = std::min(group, end - n);
      for (int64_t i = 0; i < images; ++i) {
        float* dst = padded + i * image;
        std::fill(dst, dst + image, 0.0f);
        for (int64_t c = 0; c < a.c; ++c)
          for (int64_t r = 0; r < a.h; ++r)
            std::copy_n(x + ((n + i) * a.c + c) * a.h * a.w + r * a.w, a.w,
                        dst + c * plane + (r + pad) * row + pad);
        conv_direct_transpose_planes(grad_out + (n + i) * a.o * positions, a.o, positions, op,
                                     gt + i * positions * op);
      }
      for (int64_t row0 = 0; row0 < a.out_h; row0 += band) {
        const OuterPass pass{
            images, image, std::min(band, a.out_h - row0), a.out_w, row * stride, stride, op, op};
        const float* in = padded + row0 * stride * row;
        const float* g = gt + row0 * a.out_w * op;
        for (int64_t o0 = 0; o0 < op; o0 += kLanes)
          for (int64_t r0 = 0; r0 < window_rows; r0 += tile_rows) {
            const int64_t count = std::min(tile_rows, window_rows - r0);
            outer_tile_for(k, count)(in, rows_at.data() + r0, g + o0, pass, acc + r0 * k * op + o0);
          }
      }
    }
  };
  conv_direct_weight_by_chunks(a, taps, op, run, grad_w);
}

#else  // not x86: never taken

bool conv_direct_weight_outer_suits(const Conv2dGeometry&) {
  return false;
}
void conv_direct_backward_weight_outer_avx512(const Conv2dGeometry&, const float*, const float*,
                                              float*) {
  ECH_CHECK(false, "conv_direct_backward_weight_outer_avx512: needs an x86 CPU with AVX-512");
}

#endif

}  // namespace echelon::cpu::fast
