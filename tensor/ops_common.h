// Private helpers of the dispatch layer (tensor/ops_*.cpp): argument checks with actionable
// messages (every check takes the op's name first), indexers from tensors, geometry checks, and
// the CUDA dtype dispatch. Not part of the public interface.
#pragma once

#include <vector>

#include <echelon/kernels/conv.h>
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

// Defined, floating, on `like`'s device with `like`'s dtype (like == t checks t alone), and
// float32 on CUDA.
inline void check_float_like(const char* op, const Tensor& t, const Tensor& like,
                             const char* what) {
  check_defined(op, t, what);
  ECH_CHECK(is_floating(t.dtype()), op, ": ", what, " must be float32 or float64, got ",
            t.describe(), dtype_hint(t.dtype()));
  ECH_CHECK(t.dtype() == like.dtype() && t.device() == like.device(), op, ": ", what, " is ",
            t.describe(), " but expected ", dtype_name(like.dtype()), " on ", like.device());
  ECH_CHECK(!t.is_cuda() || t.dtype() == kFloat32, op, ": ", what, " is ", t.describe(),
            "; CUDA kernels are float32 only");
}

inline void check_shape(const char* op, const Tensor& t, const Shape& expected, const char* what) {
  ECH_CHECK(t.shape() == expected, op, ": ", what, " has shape ", t.shape(), ", expected ",
            expected);
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
  ECH_CHECK(is_floating(t.dtype()), op, ": expected a float32/float64 tensor, got ", t.describe(),
            dtype_hint(t.dtype()));
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

// `window`'s geometry over an input of input_shape (N, C, H, W) with out_channels filters
// (conv2d, im2col), after checking the window and that the dilated kernel fits the padded input.
inline Conv2dGeometry conv_geometry(const char* op, const Shape& input_shape, int64_t out_channels,
                                    const Conv2dGeometry& window) {
  const Conv2dGeometry& g = window;
  ECH_CHECK(input_shape.size() == 4, op, ": input must be (N, C, H, W), got shape ", input_shape);
  ECH_CHECK(g.kernel_h > 0 && g.kernel_w > 0 && g.stride_h > 0 && g.stride_w > 0 &&
                g.dilation_h > 0 && g.dilation_w > 0 && g.pad_h >= 0 && g.pad_w >= 0,
            op, ": invalid geometry: kernel ", g.kernel_h, "x", g.kernel_w, ", stride ", g.stride_h,
            "x", g.stride_w, ", pad ", g.pad_h, "x", g.pad_w, ", dilation ", g.dilation_h, "x",
            g.dilation_w, " (kernel, stride and dilation must be positive, padding non-negative)");
  const int64_t h = input_shape[2], w = input_shape[3];
  ECH_CHECK(h + 2 * g.pad_h >= g.dilation_h * (g.kernel_h - 1) + 1 &&
                w + 2 * g.pad_w >= g.dilation_w * (g.kernel_w - 1) + 1,
            op, ": the ", g.kernel_h, "x", g.kernel_w, " kernel (dilation ", g.dilation_h, "x",
            g.dilation_w, ", pad ", g.pad_h, "x", g.pad_w, ") does not fit input ", input_shape);
  return window.for_input(input_shape[0], input_shape[1], h, w, out_channels);
}

// Contiguous data pointer of a defined tensor, or null for an undefined one.
template <typename T>
const T* ptr_or_null(const Tensor& contiguous) {
  return contiguous.defined() ? contiguous.data<T>() : nullptr;
}

// ops::step_statistics' checks (ops_reduce.cpp), shared with cross_entropy, which can count the
// statistics in its own kernel.
void check_step_statistics(const Tensor& logits, const Tensor& targets, const Tensor& loss,
                           const Tensor& guard, const Tensor& correct);

#if ECHELON_WITH_CUDA
inline cudaStream_t stream_of(const Tensor& t) {
  return cuda::current_stream(t.device().index);
}
#endif

[[noreturn]] inline void fail_not_cuda_build(const char* op) {
  ECH_FAIL(op, ": a CUDA tensor in a build without CUDA");
}

}  // namespace echelon::detail

// Like ECH_DISPATCH_ALL without float64: the integer-capable CUDA kernels' instantiations.
#define ECH_DISPATCH_CUDA_ALL(DTYPE, OP, ...)                                             \
  switch (DTYPE) {                                                                        \
    ECH_DISPATCH_CASE(::echelon::kFloat32, float, __VA_ARGS__)                            \
    ECH_DISPATCH_CASE(::echelon::kInt32, int32_t, __VA_ARGS__)                            \
    ECH_DISPATCH_CASE(::echelon::kInt64, int64_t, __VA_ARGS__)                            \
    ECH_DISPATCH_CASE(::echelon::kUInt8, uint8_t, __VA_ARGS__)                            \
    default:                                                                              \
      ECH_FAIL(OP, ": dtype ", ::echelon::dtype_name(DTYPE), " is not supported on CUDA", \
               ::echelon::dtype_hint(DTYPE));                                             \
  }
