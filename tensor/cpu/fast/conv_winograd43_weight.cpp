// The Winograd F(4x4, 3x3) weight gradient with AVX-512 (conv_winograd43.h): the transpose of the
// forward. Per vector of 16 tiles (the forward's vectors: runs of tiles on neighbouring tile rows,
// or 4 images' 2 x 2 tiles for 8x8 outputs), V = B^T d B of the 6x6 input tiles (the forward's
// input transform, from its padded image) and Z = A dY A^T of grad_out's 4x4 blocks, then
// dU[xi][c][o] += V * Z over the vector's tiles in register tiles (the F(2x2) weight gradient's,
// conv_winograd_weight_tiles.h), in passes of 1 vector while a chunk's dU fits in 64 KiB (V, Z
// and dU stay in L1 / L2 between the transforms and the GEMMs) or of 4; at the end dw = G^T dU G.
// 36 products per tile of 16 outputs where F(2x2) does 16 per 4: 2.25 multiplies per output,
// input and output channel instead of 4. Every dU entry sums its tiles in tile order in one FMA
// chain; per-chunk partials are added in chunk order.
#include <algorithm>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/tensor/cpu/fast/conv_direct.h>
#include <echelon/tensor/cpu/fast/conv_winograd43.h>
#include <echelon/tensor/cpu/fast/conv_winograd43_tiles.h>
#include <echelon/tensor/cpu/fast/conv_winograd_weight_tiles.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/cpu/fast/scratch.h>

namespace echelon::cpu::fast {

#if defined(__x86_64__) || defined(__i386__)
namespace winograd43 {
namespace {

using winograd::kBlockTiles;
using winograd::WeightTileFn;

constexpr int64_t kChannelStride = winograd::channel_stride(kXi);

inline int64_t z_tile(int64_t op) {
  return winograd::z_tile(kXi, op);
}

// A d for one column (or row) d of 4, A (6 x 4) the output transform's A^T transposed: rows
// [1 0 0 0; 1 1 1 1; 1 -1 1 -1; 1 2 4 8; 1 -2 4 -8; 0 0 0 1].
ECH_WINOGRAD_AVX512 inline void grad_1d(const __m512 (&d)[4], __m512 (&z)[6]) {
  const __m512 p02 = _mm512_add_ps(d[0], d[2]), p13 = _mm512_add_ps(d[1], d[3]);
  const __m512 q02 = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), d[2], d[0]);  // d0 + 4 d2
  const __m512 q13 = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), d[3], d[1]);  // d1 + 4 d3
  z[0] = d[0];
  z[1] = _mm512_add_ps(p02, p13);
  z[2] = _mm512_sub_ps(p02, p13);
  z[3] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), q13, q02);
  z[4] = _mm512_fnmadd_ps(_mm512_set1_ps(2.0f), q13, q02);
  z[5] = d[3];
}

// z[t][xi][o] (tiles z_tile(op) apart) = A dY A^T for the 16 tiles of vector `vec`, dY grad_out's
// 4x4 block under tile t, 16 output channels per register, from gt: the group's images' grad_out
// position-major ((P, op) each, P * op floats apart). The lanes of images the group lacks get 0.
ECH_WINOGRAD_AVX512 void grad_transform(const float* gt, const Layout& l, int64_t out_w,
                                        int64_t positions, int64_t op, int64_t vec, int64_t images,
                                        float* z) {
  for (int64_t t = 0; t < kBlockTiles; ++t) {
    float* zt = z + t * z_tile(op);
    // 4 images per vector (8x8 outputs): lane t is tile t % 4 of image t / 4.
    const int64_t image = l.images > 1 ? t / 4 : 0, tile = l.images > 1 ? t % 4 : vec * 16 + t;
    if (image >= images) {
      std::fill(zt, zt + kXi * op, 0.0f);
      continue;
    }
    const int64_t th = tile / l.tile_cols, j = tile % l.tile_cols;
    const float* g = gt + image * positions * op + (4 * th * out_w + 4 * j) * op;
    for (int64_t k = 0; k < op; k += 16) {
      __m512 s[6][4];  // A dY: s[i][column]
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        __m512 d[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; ++r) d[r] = _mm512_loadu_ps(g + (r * out_w + c) * op + k);
        __m512 col[6];
        grad_1d(d, col);
#pragma GCC unroll 6
        for (int i = 0; i < 6; ++i) s[i][c] = col[i];
      }
#pragma GCC unroll 6
      for (int i = 0; i < 6; ++i) {  // (A dY) A^T: rows
        __m512 row[6];
        grad_1d(s[i], row);
#pragma GCC unroll 6
        for (int kk = 0; kk < 6; ++kk) _mm512_storeu_ps(zt + (6 * i + kk) * op + k, row[kk]);
      }
    }
  }
}

// dw = G^T dU G of input channel c and output channels o0 .. o0 + lanes - 1 (one per lane), from
// du_c = du + c * op + o0 (its positions xi_stride apart) into g = grad_w + (o0 * C + c) * 9
// (output channels o_stride apart). Every product is kept, zeros of G included.
ECH_WINOGRAD_AVX512 void weight_block_from_du(const float* du_c, int64_t xi_stride, int64_t lanes,
                                              int64_t o_stride, float* g) {
  __m512 t[3][6];  // G^T dU: t[r][k]
#pragma GCC unroll 6
  for (int k = 0; k < 6; ++k) {
    __m512 d[6];
#pragma GCC unroll 6
    for (int i = 0; i < 6; ++i) d[i] = _mm512_loadu_ps(du_c + (6 * i + k) * xi_stride);
#pragma GCC unroll 3
    for (int r = 0; r < 3; ++r) {
      __m512 sum = _mm512_mul_ps(_mm512_set1_ps(kG[0][r]), d[0]);
#pragma GCC unroll 5
      for (int i = 1; i < 6; ++i) sum = _mm512_fmadd_ps(_mm512_set1_ps(kG[i][r]), d[i], sum);
      t[r][k] = sum;
    }
  }
  alignas(64) float out[9][16];
#pragma GCC unroll 3
  for (int r = 0; r < 3; ++r)
#pragma GCC unroll 3
    for (int s = 0; s < 3; ++s) {
      __m512 sum = _mm512_mul_ps(t[r][0], _mm512_set1_ps(kG[0][s]));
#pragma GCC unroll 5
      for (int k = 1; k < 6; ++k) sum = _mm512_fmadd_ps(t[r][k], _mm512_set1_ps(kG[k][s]), sum);
      _mm512_store_ps(out[3 * r + s], sum);
    }
  for (int64_t lane = 0; lane < lanes; ++lane)
    for (int rs = 0; rs < 9; ++rs) g[lane * o_stride + rs] = out[rs][lane];
}

// grad_w (O, C, 3, 3) = G^T dU G per (o, c), from du[xi][c][o] (output channels op apart), 16
// output channels at a time, input channels split across the pool.
void weight_from_du(const Conv2dGeometry& a, const float* du, int64_t op, float* grad_w) {
  parallel_for(a.c, 1, [&](int64_t c_begin, int64_t c_end) {
    for (int64_t c = c_begin; c < c_end; ++c)
      for (int64_t o0 = 0; o0 < a.o; o0 += 16)
        weight_block_from_du(du + c * op + o0, a.c * op, std::min<int64_t>(16, a.o - o0), a.c * 9,
                             grad_w + (o0 * a.c + c) * 9);
  });
}

template <int Run>
void backward_weight_run(const Conv2dGeometry& a, const Layout& l, const float* grad_out,
                         const float* x, float* grad_w) {
  constexpr int kPerImage = Run == 2 ? 2 : 16 / Run;  // runs of one image in a vector
  const int64_t op = (a.o + 15) / 16 * 16;            // output channels rounded up to vectors
  const int64_t positions = a.out_h * a.out_w, image = a.c * a.h * a.w;
  const int64_t padded_image = a.c * l.plane, padded_size = l.images * padded_image;
  const int64_t groups = (a.n + l.images - 1) / l.images;
  const int64_t chunks = chunk_count(groups, 1), partial = kXi * a.c * op;
  // Per chunk dU[xi][c][o] in the caller's scratch (slot 1; tasks use their own slot 0).
  const size_t partial_count = static_cast<size_t>(std::max<int64_t>(chunks, 1) * partial);
  float* partials = scratch<float>(1, partial_count);
  if (chunks == 0) std::fill(partials, partials + partial, 0.0f);  // an empty batch: dw = 0
  // The register tiles of one xi: 4, 2 or 1 vectors of 16 output channels from o0, input
  // channels from c0.
  struct Tile {
    int64_t o0, c0;
    WeightTileFn fn;
  };
  std::vector<Tile> tiles_of_xi;
  for (int64_t o0 = 0, vectors = 0; o0 < op; o0 += vectors * 16) {
    const int64_t left = (op - o0) / 16;
    vectors = left >= 4 ? 4 : left >= 2 ? 2 : 1;
    for (int64_t c0 = 0, b = 0; c0 < a.c; c0 += b) {
      b = winograd::balanced_block(a.c - c0, winograd::weight_block_512(vectors));
      tiles_of_xi.push_back({o0, c0,
                             vectors == 4   ? winograd::weight_tile_512_for<4, kXi>(b)
                             : vectors == 2 ? winograd::weight_tile_512_for<2, kXi>(b)
                                            : winograd::weight_tile_512_for<1, kXi>(b)});
    }
  }
  // Vectors per pass: 1 while dU fits in 64 KiB (ResNet-20's 16 channels), else 4 (its dU's
  // reload per pass would otherwise dominate).
  const int64_t pass_vectors = partial <= (int64_t{16} << 10) ? 1 : 4;
  const int64_t v_stride = a.c * kChannelStride;  // floats between a pass's vectors in V
  const int64_t passes_per_group = std::max<int64_t>(1, l.vectors / pass_vectors);
  const int64_t groups_ahead = std::max<int64_t>(1, pass_vectors / l.vectors);
  parallel_chunks(groups, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
    float* du = partials + chunk * partial;
    std::fill(du, du + partial, 0.0f);  // by the chunk's thread: in parallel, and cache-warm
    float* padded = scratch<float>(
        0, static_cast<size_t>(padded_size + l.images * positions * op +
                               pass_vectors * (v_stride + kBlockTiles * z_tile(op))));
    float* gt = padded + padded_size;
    float* v = gt + l.images * positions * op;
    float* z = v + pass_vectors * v_stride;
    std::fill(padded, padded + padded_size, 0.0f);  // the padding; pad_image writes the rest
    int64_t in_pass = 0;
    for (int64_t group = begin; group < end; ++group) {
      const int64_t n0 = group * l.images, images = std::min(l.images, a.n - n0);
      // The lanes of the images present (a batch's last group may lack some).
      const auto present =
          static_cast<__mmask16>(images == l.images ? 0xFFFF : (1u << 16 / l.images * images) - 1);
      for (int64_t i = 0; i < images; ++i) {
        pad_image(a, l, x + (n0 + i) * image, padded + i * padded_image);
        conv_direct_transpose_planes(grad_out + (n0 + i) * a.o * positions, a.o, positions, op,
                                     gt + i * positions * op);
      }
      for (int64_t vec = 0; vec < l.vectors; ++vec) {
        const int64_t tile = vec * 16, th0 = tile / l.tile_cols, j0 = tile % l.tile_cols;
        float* v_vec = v + in_pass * v_stride;
        for (int64_t c = 0; c < a.c; ++c)
          input_transform<Run, kPerImage>(padded + c * l.plane, l, 4 * th0 * l.row + j0,
                                          padded_image, present, v_vec + c * kChannelStride);
        grad_transform(gt, l, a.out_w, positions, op, vec, images,
                       z + in_pass * kBlockTiles * z_tile(op));
        if (++in_pass < pass_vectors && !(group + 1 == end && vec + 1 == l.vectors)) continue;
        // The images of the next groups, a share per GEMM over this group's passes (or the
        // groups the next pass reads): their first reads (pad_image, the transpose) otherwise
        // stall on memory.
        const int64_t next = std::min(groups_ahead * l.images, a.n - (n0 + images));
        for (int64_t xi = 0; xi < kXi; ++xi) {
          if (next > 0 && group + 1 < end) {
            const int64_t part = vec / pass_vectors * kXi + xi, parts = passes_per_group * kXi;
            winograd::prefetch_part(x + (n0 + images) * image, next * image * 4, part, parts);
            winograd::prefetch_part(grad_out + (n0 + images) * a.o * positions,
                                    next * a.o * positions * 4, part, parts);
          }
          for (const Tile& t : tiles_of_xi)
            t.fn(v + t.c0 * kChannelStride + xi * kBlockTiles, v_stride, z + xi * op + t.o0,
                 in_pass, op, du + (xi * a.c + t.c0) * op + t.o0);
        }
        in_pass = 0;
      }
    }
  });
  winograd::sum_chunk_partials(partials, partial, chunks);
  weight_from_du(a, partials, op, grad_w);
}

}  // namespace
}  // namespace winograd43

void conv_winograd43_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                     float* grad_w) {
  ECH_CHECK(conv_winograd43_usable(a), "conv_winograd43_backward_weight: geometry not supported (",
            a.kernel_h, "x", a.kernel_w, " window, stride ", a.stride_h, ", output ", a.out_h, "x",
            a.out_w, ", ", a.c, " input channels)");
  const winograd43::Layout l = winograd43::layout_of(a);
  if (l.run == 16)
    winograd43::backward_weight_run<16>(a, l, grad_out, x, grad_w);
  else if (l.run == 8)
    winograd43::backward_weight_run<8>(a, l, grad_out, x, grad_w);
  else if (l.run == 4)
    winograd43::backward_weight_run<4>(a, l, grad_out, x, grad_w);
  else
    winograd43::backward_weight_run<2>(a, l, grad_out, x, grad_w);
}

#else  // not x86: never usable

void conv_winograd43_backward_weight(const Conv2dGeometry&, const float*, const float*, float*) {
  ECH_CHECK(false, "conv_winograd43_backward_weight: needs an x86 CPU with AVX-512");
}

#endif

}  // namespace echelon::cpu::fast
