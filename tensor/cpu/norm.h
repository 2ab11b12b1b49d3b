// Normalisation CPU twins (naive): batch norm and local response norm. cuda/kernels/norm.h
// declares the same names for float on a stream. Tensors are viewed as (N, C, S) with S the
// product of the spatial dims (1 for (N, C) input).
#pragma once

#include <cstdint>

#include <echelon/kernels/norm.h>
#include <echelon/kernels/philox.h>

namespace echelon::cpu {

// Training mode. Normalises x (N, C, S) with the batch mean and biased variance, writes
// save_mean/save_invstd (C) for backward and updates running_mean/var (C) in place with the
// unbiased variance (PyTorch). gamma/beta (C) may be null (1 and 0); running_mean/var may be
// null (not tracked). Requires N*S > 1.
template <typename T>
void batch_norm_train_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                              T* running_mean, T* running_var, double momentum, double eps, T* y,
                              T* save_mean, T* save_invstd);
// Eval mode: normalises with running_mean/var (C).
template <typename T>
void batch_norm_eval_forward(const NormArgs& a, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y);
// Gradients of the training-mode forward. grad_gamma/grad_beta (C) may be null (not wanted).
template <typename T>
void batch_norm_backward(const NormArgs& a, const T* grad_out, const T* x, const T* gamma,
                         const T* save_mean, const T* save_invstd, T* grad_in, T* grad_gamma,
                         T* grad_beta);

// Local response norm across channels (torch.nn.LocalResponseNorm): channel c's window is
// [c - size/2, c + (size-1)/2]; scale = k + alpha/size * sum x^2 over it; y = x * scale^-beta.
template <typename T>
void lrn_forward(const NormArgs& a, int64_t size, double alpha, double beta, double k, const T* x,
                 T* y, T* scale);
template <typename T>
void lrn_backward(const NormArgs& a, int64_t size, double alpha, double beta, const T* grad_out,
                  const T* x, const T* y, const T* scale, T* grad_in);

// Dropout mask (it lives here as the other regulariser): out[i] = 0 when
// philox_uniform(state, i) < p, else 1/(1-p); the CUDA kernel draws the same numbers.
template <typename T>
void dropout_mask(int64_t count, double p, PhiloxState state, T* out);

}  // namespace echelon::cpu
