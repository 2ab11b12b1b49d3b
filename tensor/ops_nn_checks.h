// Shared argument checks of the neural-network op dispatch (tensor/ops_nn.cpp and
// tensor/ops_nn_train.cpp). Internal: not part of the public interface.
#pragma once

#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon::ops::nn_detail {

inline void check_defined(const Tensor& t, const char* op, const char* what) {
  ECH_CHECK(t.defined(), op, ": ", what, " is undefined");
}

// Defined, floating, on `like`'s device with `like`'s dtype (like == t checks t alone).
inline void check_float_like(const Tensor& t, const Tensor& like, const char* op,
                             const char* what) {
  check_defined(t, op, what);
  ECH_CHECK(is_floating(t.dtype()), op, ": ", what, " must be float32 or float64, got ",
            t.describe());
  ECH_CHECK(t.dtype() == like.dtype() && t.device() == like.device(), op, ": ", what, " is ",
            t.describe(), " but expected ", dtype_name(like.dtype()), " on ", like.device());
  ECH_CHECK(!t.is_cuda() || t.dtype() == kFloat32, op, ": ", what, " is ", t.describe(),
            "; CUDA kernels are float32 only");
}

inline void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* what) {
  ECH_CHECK(t.shape() == expected, op, ": ", what, " has shape ", t.shape(), ", expected ",
            expected);
}

// Contiguous data pointer of a defined tensor, or null for an undefined one.
template <typename T>
const T* ptr_or_null(const Tensor& contiguous) {
  return contiguous.defined() ? contiguous.data<T>() : nullptr;
}

#if ECHELON_WITH_CUDA
inline cudaStream_t stream_of(const Tensor& t) {
  return cuda::current_stream(t.device().index);
}
#endif

[[noreturn]] inline void fail_not_cuda_build(const char* op) {
  ECH_FAIL(op, ": a CUDA tensor in a build without CUDA");
}

}  // namespace echelon::ops::nn_detail
