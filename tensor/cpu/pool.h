// Pooling CPU twins (naive). cuda/kernels/pool.h declares the same names for float on a stream.
// The geometry (window, shapes, output size) is a filled Pool2dGeometry (kernels/pool.h).
#pragma once

#include <cstdint>

#include <echelon/kernels/pool.h>

namespace echelon::cpu {

// y (N, C, OH, OW) = window max of x (N, C, H, W); argmax (N, C, OH, OW) gets the flat index
// ih * W + iw of the max inside its plane (NaN wins, as PyTorch).
template <typename T>
void max_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y, int64_t* argmax);
// grad_in (N, C, H, W) = sum of grad_out (N, C, OH, OW) routed through argmax (N, C, OH, OW),
// scattered from 0 in output order. Overwrites grad_in. relu_out (N, C, OH, OW; may be null):
// the pooled output of max_pool2d(relu(x)); a term then passes only where relu_out > 0, ReLU's
// backward first (a masked term adds nothing: the same as adding its +0). Also the twin of
// cuda::max_pool2d_backward_gather: with every argmax in its own window, the scatter in output
// order adds each input's terms in ascending (oh, ow), as the gather does.
template <typename T>
void max_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, const int64_t* argmax,
                         T* grad_in, const T* relu_out = nullptr);
template <typename T>
void avg_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y);
// Overwrites grad_in (N, C, H, W).
template <typename T>
void avg_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, T* grad_in);

}  // namespace echelon::cpu
