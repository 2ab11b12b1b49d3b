// Strided indexing shared by the CPU twins (tensor/cpu) and the CUDA kernels (cuda/kernels):
// kernels take raw pointers plus this small fixed-size struct, passed by value (it fits in a
// kernel's parameter space). Nothing here knows about Tensor.
#pragma once

#include <cstdint>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/base/op_kinds.h>

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

}  // namespace echelon
