// Differentiable functions: each wraps a raw op from tensor/ops.h and records its gradient
// (a lambda right beside the forward, in the matching .cpp) when grad mode is on and an input
// requires grad. Broadcasting ops reduce gradients back to each input's shape (sum_to).
//
// The raw ops of the same names (ops::conv2d, ...) never record. No argument type here lives in
// echelon::ops (the geometry structs are in echelon::, kernels/), so argument-dependent lookup
// never brings a raw op in: an unqualified conv2d(...) in namespace echelon always records.
//
// Saved tensors are references, not copies: see autograd/node.h on stale weights.
#pragma once

#include <cstdint>
#include <vector>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>
#include <echelon/tensor/tensor.h>

namespace echelon {

// ---- arithmetic (NumPy broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);  // a > 0 where b's gradient is needed
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor pow(const Tensor& a, double exponent);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

// ---- elementwise ----
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor square(const Tensor& x);

// ---- matrix products ----
// (M, K) x (K, N) -> (M, N), or batched (B, M, K) x (B, K, N) -> (B, M, N).
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- reductions ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- shape ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor view(const Tensor& x, const Shape& shape);     // x must be contiguous
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);      // materialised
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);  // materialised
Tensor concat(const std::vector<Tensor>& xs, int64_t dim);

// ---- neural-network functions ----
// x (N, in), weight (out, in), bias (out) or undefined -> (N, out).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// relu(linear(x, weight, bias)) with the same result and gradient bit for bit; where
// fused_kernels_for(x) and there is a bias, one node: the bias and the ReLU in one pass after the
// matmul (ops::add_row_bias_), the ReLU's backward and the bias gradient in one
// (ops::relu_backward_column_sums): one kernel each on CUDA instead of two. Else the composition.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias);
// x (N, C, H, W), weight (O, C, KH, KW), bias (O) or undefined -> (N, O, OH, OW).
// window: kernel (equal to the weight's KH, KW), stride, padding, dilation.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dGeometry& window);
// relu(conv2d(x, weight, bias, window)) with the same result and gradient bit for bit; where
// fused_kernels_for(x) (CUDA, the fast CPU path, fusion on) one node: on CUDA the implicit GEMM
// clamps in its store, and the backward masks the gradient by y > 0 in the bias gradient's pass
// (ops::conv2d_backward's relu_out). Else the composition.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Conv2dGeometry& window);
// (N, C, H, W) -> (N, C, OH, OW); window: kernel, stride, padding, ceil mode, divisor rule.
Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& window);
// max_pool2d(relu(x), window) with the same result and gradient bit for bit; on the fast CPU path
// one node whose forward reads x through the ReLU and whose backward masks the pooled gradient by
// y > 0 before the scatter: relu(x) (x's size) is neither stored nor read back (else the
// composition).
Tensor relu_max_pool2d(const Tensor& x, const Pool2dGeometry& window);
Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& window);
// (N, C, H, W) -> (N, C, 1, 1), like PyTorch's AdaptiveAvgPool2d(1).
Tensor global_avg_pool2d(const Tensor& x);
// x (N, C) or (N, C, H, W); gamma, beta, running_mean, running_var (C). Training: batch
// statistics, running stats updated in place (PyTorch momentum convention). Eval: running stats.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(...)) with the same arguments and result; in training on the fast CPU path one
// fused kernel each way (no separate ReLU pass, no stored pre-ReLU tensor), else the composition.
Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       Tensor& running_mean, Tensor& running_var, bool training,
                       double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(x, ...) + residual), residual of x's shape: a ResNet block's end. In training
// on the fast CPU path one fused kernel each way (no stored sum or pre-ReLU tensor; the backward
// writes the residual's gradient in batch norm's first pass), else the composition.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           bool training, double momentum = 0.1, double eps = 1e-5);
// Across-channel local response normalisation, x (N, C, H, W) (PyTorch's formula).
Tensor lrn(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training;
// identity otherwise. The mask is drawn from gen (Philox: same mask on CPU and CUDA).
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
// logits (N, C), target int64 (N) -> mean loss, a one-element tensor (shape []). With statistics,
// also the step's (ops::step_statistics; in the loss's own kernel where ops::cross_entropy can).
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     ops::StepStatistics* statistics = nullptr);

}  // namespace echelon
