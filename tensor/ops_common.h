// Private helpers of the dispatch layer (tensor/ops_*.cpp): argument checks with actionable
// messages, indexers from tensors, and the CUDA dtype dispatch.
#pragma once

#include <vector>

#include <echelon/kernels/indexer.h>
#include <echelon/tensor/tensor.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::detail {

inline StridedIndexer indexer_of(const Tensor& t) {
  return make_indexer(t.shape(), t.strides());
}

// Reads `t` as if it had shape `out_shape` (NumPy broadcasting): stride 0 on broadcast dims.
inline StridedIndexer broadcast_indexer(const Tensor& t, const Shape& out_shape) {
  const size_t lead = out_shape.size() - t.shape().size();
  Strides strides(out_shape.size(), 0);
  for (size_t i = lead; i < out_shape.size(); ++i)
    strides[i] = t.shape()[i - lead] == 1 ? 0 : t.strides()[i - lead];
  return make_indexer(out_shape, strides);
}

inline void check_defined(const char* op, const Tensor& t, const char* what = "input") {
  ECH_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

inline void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  ECH_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch: ", a.describe(), " vs ", b.describe());
}

inline void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  ECH_CHECK(a.device() == b.device(), op, ": device mismatch: ", a.describe(), " vs ",
            b.describe());
}

inline void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  ECH_CHECK(a.shape() == b.shape(), op, ": shape mismatch: ", a.shape(), " vs ", b.shape());
}

inline void check_floating(const char* op, const Tensor& t) {
  ECH_CHECK(is_floating(t.dtype()), op, ": expected a float32/float64 tensor, got ", t.describe());
}

inline void check_dtype(const char* op, const Tensor& t, DType dtype, const char* what) {
  ECH_CHECK(t.dtype() == dtype, op, ": ", what, " must be ", dtype_name(dtype), ", got ",
            t.describe());
}

// CUDA kernels exist for float32 (and integer types for copy/cast/index ops only).
inline void check_cuda_float(const char* op, const Tensor& t) {
  ECH_CHECK(t.dtype() == kFloat32, op, ": CUDA kernels support float32 only, got ", t.describe(),
            " (use float64 on the CPU)");
}

}  // namespace echelon::detail

// Like ECH_DISPATCH_ALL without float64: the integer-capable CUDA kernels' instantiations.
#define ECH_DISPATCH_CUDA_ALL(DTYPE, OP, ...)                                              \
  switch (DTYPE) {                                                                         \
    ECH_DISPATCH_CASE(::echelon::kFloat32, float, __VA_ARGS__)                             \
    ECH_DISPATCH_CASE(::echelon::kInt32, int32_t, __VA_ARGS__)                             \
    ECH_DISPATCH_CASE(::echelon::kInt64, int64_t, __VA_ARGS__)                             \
    ECH_DISPATCH_CASE(::echelon::kUInt8, uint8_t, __VA_ARGS__)                             \
    default:                                                                               \
      ECH_FAIL(OP, ": dtype ", ::echelon::dtype_name(DTYPE), " is not supported on CUDA"); \
  }
