// Plain argument structs and host+device helpers shared by the CPU twins (tensor/cpu) and the
// CUDA kernels (cuda/kernels). Nothing here knows about Tensor: kernels take raw pointers plus
// these small fixed-size structs, passed by value (they fit in a kernel's parameter space).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "base/error.h"
#include "base/op_kinds.h"
#include "tensor/random.h"

namespace echelon {

inline constexpr int kMaxDims = 8;

// Maps a linear (row-major) index over `sizes` to an element offset through `strides`.
// Broadcast inputs use stride 0 on broadcast dims, so a binary op reads them without a copy.
// rank 0 means a single element at offset 0.
struct StridedIndexer {
  int rank = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

ECH_HD int64_t strided_offset(const StridedIndexer& ix, int64_t linear) {
  int64_t offset = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    const int64_t size = ix.sizes[d];
    offset += (linear % size) * ix.strides[d];
    linear /= size;
  }
  return offset;
}

// Host-side builder; throws when the rank exceeds kMaxDims. Dims of size 1 are dropped and
// adjacent dims that are contiguous with each other merged, so kernels divide less.
inline StridedIndexer make_indexer(const std::vector<int64_t>& sizes,
                                   const std::vector<int64_t>& strides) {
  StridedIndexer ix;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    if (ix.rank > 0 && ix.strides[ix.rank - 1] == strides[d] * sizes[d]) {
      ix.sizes[ix.rank - 1] *= sizes[d];
      ix.strides[ix.rank - 1] = strides[d];
      continue;
    }
    ECH_CHECK(ix.rank < kMaxDims, "tensors of rank > ", kMaxDims, " are not supported (shape ",
              sizes, ")");
    ix.sizes[ix.rank] = sizes[d];
    ix.strides[ix.rank] = strides[d];
    ++ix.rank;
  }
  return ix;
}

// Geometry of one im2col/col2im call: input (n, channels, height, width) and output columns
// (n, channels*kernel_h*kernel_w, out_h*out_w). Row r of the columns is (c, ki, kj) with
// r = (c*kernel_h + ki)*kernel_w + kj; column q is (oh, ow) with q = oh*out_w + ow; it reads
// input pixel (oh*stride_h - pad_h + ki*dilation_h, ow*stride_w - pad_w + kj*dilation_w), zero
// when outside the image.
struct Im2colArgs {
  int64_t n = 1, channels = 1, height = 1, width = 1;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t out_h = 1, out_w = 1;
};

// ---- Philox distributions: the exact formulas both backends use ------------------------------
// Normals come in Box-Muller pairs: elements 2j and 2j+1 share words 2j and 2j+1 of the stream
// (so a tensor of n normals consumes n words rounded up to even). Computed in double, so float
// results agree across backends up to the final rounding.
ECH_HD double philox_normal(PhiloxState state, uint64_t i) {
  const uint64_t pair = i / 2;
  // u1 in (0, 1] keeps log() finite; u2 in [0, 1).
  const double u1 =
      (static_cast<double>(philox_word(state, 2 * pair)) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(philox_word(state, 2 * pair + 1)) * (1.0 / 4294967296.0);
  const double radius = sqrt(-2.0 * log(u1));
  const double angle = 6.283185307179586 * u2;
  return (i % 2 == 0) ? radius * cos(angle) : radius * sin(angle);
}

// 1 with probability p: compares the exactly representable 24-bit uniform against p.
ECH_HD bool philox_bernoulli(PhiloxState state, uint64_t i, double p) {
  return static_cast<double>(philox_uniform(state, i)) < p;
}

}  // namespace echelon
