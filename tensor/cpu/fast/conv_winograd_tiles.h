// Internal to conv_winograd.cpp (forward, backward data) and conv_winograd_weight.cpp (backward
// weight): the layouts both use and the transforms they share. Defined for x86 only; the
// functions taking tiles are compiled for AVX2 + FMA and run only where conv_winograd_usable().
#pragma once

#include <cstdint>
#include <vector>

#include <echelon/kernels/conv.h>

// The AVX2 and AVX-512 functions below carry the target attribute on their declarations too (a
// declaration without it would name a different function version to GCC).
#if defined(__x86_64__) || defined(__i386__)
#define ECH_WINOGRAD_AVX2 __attribute__((target("avx2,fma")))
#define ECH_WINOGRAD_AVX512 __attribute__((target("avx512f,avx2,fma")))
#else
#define ECH_WINOGRAD_AVX2
#define ECH_WINOGRAD_AVX512
#endif

namespace echelon::cpu::fast::winograd {

constexpr int64_t kLanes = 8;  // tiles per vector: two quads of 4
constexpr int64_t kXi = 16;    // transformed positions of a 4x4 tile
// V and M hold, per channel and tile vector, its 16 transformed positions one after another
// (kXi x 8 floats): the transforms read and write one contiguous run per vector.
constexpr int64_t kVector = kXi * kLanes;
constexpr int kBlock = 6;  // output channels per GEMM register tile (6 x 2 accumulators)

// The next register-tile block of `left` channels, at most `most`, the blocks as even as they
// can be (16 = 8 + 8, not 12 + 4: a 4-channel tile has too few independent FMA chains).
inline int64_t balanced_block(int64_t left, int64_t most) {
  const int64_t blocks = (left + most - 1) / most;
  return (left + blocks - 1) / blocks;
}

// Sizes of one image's buffers. The padded image: channel c, phase ph (padded column parity),
// padded row r, index q holds padded column ph + 2q, i.e. x[c][r - pad][ph + 2q - pad] or 0.
struct Layout {
  int64_t rows, row, phase, plane;  // padded rows, floats per phase row, phase and channel strides
  int64_t tile_cols, quads, vectors;
};

Layout layout_of(const Conv2dGeometry& a);

// Writes the image's pixels (x (C, H, W)) into their padded places in dst; the padding is left as
// it is (zeroed once by the caller).
ECH_WINOGRAD_AVX2 void pad_image(const Conv2dGeometry& a, const Layout& l, const float* x,
                                 float* dst);

// A vector of 8 tiles: quad `lo` in lanes 0-3, quad `hi` in lanes 4-7 (a copy of lo, never
// stored, when the image has an odd number of quads). in: offset of the quad's first tile's
// padded row 2th, index j0; out: offset of its first output (2th, 2j0) in the output plane.
struct TileVector {
  int64_t in_lo, in_hi, out_lo, out_hi;
  bool has_hi;
  bool joined;  // hi follows lo in the same tile row: one 8-wide load or store covers both
};

std::vector<TileVector> tile_vectors(const Conv2dGeometry& a, const Layout& l);

// Prefetches part `part` of `parts` of the `bytes` at p into L2. Spread over one image's
// compute-bound GEMMs, it brings in the next image, whose first read (pad_image) otherwise
// stalls on memory: activations are read once per layer, long after they were written.
void prefetch_part(const float* p, int64_t bytes, int64_t part, int64_t parts);

// B^T d B of the tiles of `count` vectors of one channel's padded plane: vector i goes to
// v_c + (i / 2) * pair + (i % 2) * half, its 16 transformed positions `step` apart.
ECH_WINOGRAD_AVX2 void input_transform(const float* plane, const Layout& l,
                                       const TileVector* vectors, int64_t count, float* v_c,
                                       int64_t pair, int64_t half, int64_t step);

// Where a forward pass (two vectors, 16 tiles) reads the unpadded image with AVX-512
// (conv_winograd_direct.cpp). Vector i: lo[i], hi[i]: offsets in the channel's (H, W) plane of its
// lo quad's first input (row 2th - pad, column 2j0 - pad; may lie outside the image) and of its hi
// quad's less 8 (its load fills lanes 8-15); joined[i]: both the same (one load). lanes[r][s][i]:
// the lanes of row r's 16 floats at shift 2s that lie in the image (lo quad bits 0-7, hi 8-15;
// none for a missing quad or vector), the rest read as the padding's zeros.
struct DirectPass {
  int64_t lo[2] = {0, 0}, hi[2] = {0, 0};
  bool joined[2] = {false, false};
  uint16_t lanes[4][2][2] = {};
};

std::vector<DirectPass> direct_passes(const Conv2dGeometry& a, const Layout& l);

// The input transform of pass d (or of a pass with one vector: lanes 8-15 are 0) from x, the
// channel's unpadded (H, W) plane: bit for bit the v_c[xi][16 tiles] that input_transform gives
// from the padded copy (pair 0, half 8, step 16), without that copy.
ECH_WINOGRAD_AVX512 void input_transform_direct_512(const float* x, int64_t width,
                                                    const DirectPass& d, float* v_c);

// A GEMM register tile: m[j*o_stride] (+ lanes) = sum over c of u[c*B + j] * v[c*c_stride] (+
// lanes) for B output channels.
using GemmTileFn = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t);
// The AVX-512 tile of `block` (1..16) output channels x 16 lanes (conv_winograd.cpp), for the
// F(4x4, 3x3) path (conv_winograd43.cpp).
GemmTileFn gemm_tile_512_pick(int64_t block);

}  // namespace echelon::cpu::fast::winograd
