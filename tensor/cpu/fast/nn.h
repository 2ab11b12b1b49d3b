// Fast CPU batch norm (nn.cpp) and max pooling (pool.cpp): the naive twins' algorithms
// (tensor/cpu/{norm,pool}.h), vectorised per plane and split across the thread pool by plane,
// walked in memory order.
// Batch-norm sums run in T within a plane and in double across planes (per channel in image
// order, whatever the thread count), so they agree with the double-accumulating twins to float
// rounding; pooling is bit-identical to its twin.
#pragma once

#include <cstdint>

#include <echelon/kernels/norm.h>
#include <echelon/kernels/pool.h>

namespace echelon::cpu::fast {

// Whether batch norm's float per-plane loops take their AVX-512 twins (tensor/cpu/fast/
// nn_avx512.h), the default where the CPU has AVX-512F. Results are bit-identical either way;
// tests switch it off to compare the two. set_batch_norm_avx512(true) throws without AVX-512F.
bool batch_norm_avx512_available();
void set_batch_norm_avx512(bool on);
bool batch_norm_avx512();

// As cpu::batch_norm_train_forward: x, y (N, C, S); gamma, beta, running_*, save_* (C).
template <typename T>
void batch_norm_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                              T* running_mean, T* running_var, double momentum, double eps, T* y,
                              T* save_mean, T* save_invstd);
// As batch_norm_train_forward followed by a ReLU (y = v > 0 ? v : 0), in the same store pass;
// with a residual (N, C, S) (may be null), y = ReLU(batch norm + residual): a ResNet block's end.
// save_affine (C, 2) (may be null) receives each channel's scale and shift (the store pass's
// y = ReLU(x * scale + shift [+ residual])), for batch_norm_relu_backward's relu_affine.
template <typename T>
void batch_norm_relu_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                                   T* running_mean, T* running_var, double momentum, double eps,
                                   T* y, T* save_mean, T* save_invstd, const T* residual = nullptr,
                                   T* save_affine = nullptr);
// As cpu::batch_norm_backward.
template <typename T>
void batch_norm_backward(const NormArgs& a, const T* grad_out, const T* x, const T* gamma,
                         const T* save_mean, const T* save_invstd, T* grad_in, T* grad_gamma,
                         T* grad_beta);
// The backward of batch_norm_relu_train_forward: batch_norm_backward of grad_out * (y > 0), where
// y (N, C, S) is the fused forward's output. The masked gradient is stored in masked (N, C, S)
// when it is not null (the residual's gradient), and then read back by the second pass in place
// of grad_out and y; otherwise it is never stored. relu_affine (C, 2) (only without a residual and
// without masked): the forward's save_affine; the mask y > 0 is then recomputed as
// x * scale + shift > 0 (the same signs; y is not read: 5 streams over the batch instead of 7).
template <typename T>
void batch_norm_relu_backward(const NormArgs& a, const T* grad_out, const T* y, const T* x,
                              const T* gamma, const T* save_mean, const T* save_invstd, T* grad_in,
                              T* grad_gamma, T* grad_beta, T* masked = nullptr,
                              const T* relu_affine = nullptr);

// Max pooling (tensor/cpu/fast/pool.cpp). Whether its float 2x2 plane loops take their AVX-512
// twins (pool_avx512.h), the default where the CPU has AVX-512F; else AVX2 or portable loops.
// Results are bit-identical either way; tests switch it off to compare.
bool max_pool_avx512_available();
void set_max_pool_avx512(bool on);
bool max_pool_avx512();

// As cpu::max_pool2d_forward: x (N, C, H, W) -> y, argmax (N, C, OH, OW). With relu, of
// relu(x) (each element read as x > 0 ? x : +0, NaN -> +0, the ReLU twin's rule) without storing
// it: y and argmax bit-identical to a ReLU pass followed by the pooling.
template <typename T>
void max_pool2d_forward(const Pool2dGeometry& a, const T* x, T* y, int64_t* argmax,
                        bool relu = false);
// As cpu::max_pool2d_backward, checking each argmax index against its plane (throws naming the
// index): the caller need not scan argmax first. With AVX-512, a float plane of 8 or more windows
// a row whose every index lies in its own 2x2 cell (rows 2 oh, 2 oh + 1, columns 2 ow, 2 ow + 1:
// any 2x2, stride-2 pooling's) is written in one pass, each input 0 + its gradient or 0: the
// scatter's result without its zero fill.
template <typename T>
void max_pool2d_backward(const Pool2dGeometry& a, const T* grad_out, const int64_t* argmax,
                         T* grad_in);
// As cpu::max_pool2d_backward with relu_out (may be null), a's window being the forward's: each
// argmax index is checked against its own window (throws naming the index, its output and the
// window), the precondition of ops::max_pool2d_backward with a window. ReLU's mask is applied in
// the same pass (the one-pass cells too, where each cell lies in its window).
template <typename T>
void max_pool2d_backward_in_windows(const Pool2dGeometry& a, const T* grad_out,
                                    const int64_t* argmax, T* grad_in, const T* relu_out);

}  // namespace echelon::cpu::fast
