// Launchers of cuda/kernels/norm.cu: same names and arguments as tensor/cpu/norm.h, float only,
// device pointers, plus the stream. Batch norm also fuses a ReLU (and a residual added before it):
// forward y = ReLU(bn(x) + residual); backward takes relu_out, that y, and masks grad_out with
// relu_out > 0 inside both passes (masked, when not null, receives the masked gradient: the
// residual's). Their CPU twin is the composition of the twins (tensor/ops_nn_train.cpp).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/norm.h>
#include <echelon/kernels/philox.h>

namespace echelon::cuda {

void batch_norm_train_forward(const NormArgs& a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var,
                              double momentum, double eps, bool relu, const float* residual,
                              float* y, float* save_mean, float* save_invstd, cudaStream_t stream);
void batch_norm_eval_forward(const NormArgs& a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var,
                             double eps, float* y, cudaStream_t stream);
void batch_norm_backward(const NormArgs& a, const float* grad_out, const float* relu_out,
                         const float* x, const float* gamma, const float* save_mean,
                         const float* save_invstd, float* grad_in, float* grad_gamma,
                         float* grad_beta, float* masked, cudaStream_t stream);
void lrn_forward(const NormArgs& a, int64_t size, double alpha, double beta, double k,
                 const float* x, float* y, float* scale, cudaStream_t stream);
void lrn_backward(const NormArgs& a, int64_t size, double alpha, double beta, const float* grad_out,
                  const float* x, const float* y, const float* scale, float* grad_in,
                  cudaStream_t stream);
void dropout_mask(int64_t count, double p, PhiloxState state, float* out, cudaStream_t stream);

}  // namespace echelon::cuda
