// Launchers of cuda/kernels/norm.cu: same names and arguments as tensor/cpu/norm.h, float only,
// device pointers, plus the stream.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/kernels/norm.h>
#include <echelon/kernels/philox.h>

namespace echelon::cuda {

void batch_norm_train_forward(const NormArgs& a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var,
                              double momentum, double eps, float* y, float* save_mean,
                              float* save_invstd, cudaStream_t stream);
void batch_norm_eval_forward(const NormArgs& a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var,
                             double eps, float* y, cudaStream_t stream);
void batch_norm_backward(const NormArgs& a, const float* grad_out, const float* x,
                         const float* gamma, const float* save_mean, const float* save_invstd,
                         float* grad_in, float* grad_gamma, float* grad_beta, cudaStream_t stream);
void lrn_forward(const NormArgs& a, int64_t size, double alpha, double beta, double k,
                 const float* x, float* y, float* scale, cudaStream_t stream);
void lrn_backward(const NormArgs& a, int64_t size, double alpha, double beta, const float* grad_out,
                  const float* x, const float* y, const float* scale, float* grad_in,
                  cudaStream_t stream);
void dropout_mask(int64_t count, double p, PhiloxState state, float* out, cudaStream_t stream);

}  // namespace echelon::cuda
