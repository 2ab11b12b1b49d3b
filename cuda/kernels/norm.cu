// Normalisation kernels: batch norm, LRN, dropout mask. Why this shape: batch-norm statistics
// are per-channel reductions over N*S values, so one block owns one channel and makes its passes
// (mean, centred variance, normalise) with CUB block sums in double, matching the CPU twin's
// two-pass formula; LRN and dropout are elementwise with a short channel window.
#include <echelon/cuda/kernels/norm.h>

#include <cub/block/block_reduce.cuh>

#include <echelon/cuda/launch.h>

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

using BlockSum = cub::BlockReduce<double, kBlock>;

// Sum over the block, visible to every thread (temp is reused, hence the barriers).
__device__ double block_sum(double value, BlockSum::TempStorage& temp, double* shared) {
  const double total = BlockSum(temp).Sum(value);
  if (threadIdx.x == 0) *shared = total;
  __syncthreads();
  const double result = *shared;
  __syncthreads();
  return result;
}

__device__ __forceinline__ int64_t at(const NormArgs& a, int64_t i, int64_t c) {
  // i runs over the N*S values of channel c
  return ((i / a.spatial) * a.c + c) * a.spatial + i % a.spatial;
}

__global__ void batch_norm_train_kernel(NormArgs a, const float* x, const float* gamma,
                                        const float* beta, float* running_mean, float* running_var,
                                        double momentum, double eps, float* y, float* save_mean,
                                        float* save_invstd) {
  __shared__ BlockSum::TempStorage temp;
  __shared__ double shared;
  const int64_t c = blockIdx.x, count = a.n * a.spatial;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += x[at(a, i, c)];
  const double mean = block_sum(acc, temp, &shared) / static_cast<double>(count);
  acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const double d = x[at(a, i, c)] - mean;
    acc += d * d;
  }
  const double squares = block_sum(acc, temp, &shared);
  const double invstd = rsqrt(squares / static_cast<double>(count) + eps);
  const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t j = at(a, i, c);
    y[j] = static_cast<float>((x[j] - mean) * invstd * g + b);
  }
  if (threadIdx.x == 0) {
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    if (running_mean) {
      const double unbiased = squares / static_cast<double>(count - 1);
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    }
  }
}

__global__ void batch_norm_eval_kernel(NormArgs a, const float* x, const float* gamma,
                                       const float* beta, const float* running_mean,
                                       const float* running_var, double eps, float* y) {
  const int64_t total = a.n * a.c * a.spatial;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / a.spatial) % a.c;
    const double invstd = rsqrt(static_cast<double>(running_var[c]) + eps);
    const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
    y[i] = static_cast<float>((x[i] - static_cast<double>(running_mean[c])) * invstd * g + b);
  }
}

__global__ void batch_norm_backward_kernel(NormArgs a, const float* grad_out, const float* x,
                                           const float* gamma, const float* save_mean,
                                           const float* save_invstd, float* grad_in,
                                           float* grad_gamma, float* grad_beta) {
  __shared__ BlockSum::TempStorage temp;
  __shared__ double shared;
  const int64_t c = blockIdx.x, count = a.n * a.spatial;
  const double mean = save_mean[c], invstd = save_invstd[c];
  double acc_dy = 0.0, acc_dy_xhat = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t j = at(a, i, c);
    acc_dy += grad_out[j];
    acc_dy_xhat += grad_out[j] * (x[j] - mean) * invstd;
  }
  const double sum_dy = block_sum(acc_dy, temp, &shared);
  const double sum_dy_xhat = block_sum(acc_dy_xhat, temp, &shared);
  const double g = gamma ? gamma[c] : 1.0, m = static_cast<double>(count);
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) {
    const int64_t j = at(a, i, c);
    const double xhat = (x[j] - mean) * invstd;
    grad_in[j] =
        static_cast<float>(g * invstd / m * (m * grad_out[j] - sum_dy - xhat * sum_dy_xhat));
  }
  if (threadIdx.x == 0) {
    if (grad_gamma) grad_gamma[c] = static_cast<float>(sum_dy_xhat);
    if (grad_beta) grad_beta[c] = static_cast<float>(sum_dy);
  }
}

__global__ void lrn_forward_kernel(NormArgs a, int64_t size, double alpha, double beta, double k,
                                   const float* x, float* y, float* scale) {
  const int64_t total = a.n * a.c * a.spatial;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i % a.spatial, c = (i / a.spatial) % a.c, n = i / (a.spatial * a.c);
    const int64_t lo = max(c - size / 2, int64_t{0}), hi = min(c + (size - 1) / 2, a.c - 1);
    double squares = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
      const double v = x[(n * a.c + j) * a.spatial + s];
      squares += v * v;
    }
    const double sc = k + alpha / static_cast<double>(size) * squares;
    scale[i] = static_cast<float>(sc);
    y[i] = static_cast<float>(x[i] * pow(sc, -beta));
  }
}

__global__ void lrn_backward_kernel(NormArgs a, int64_t size, double alpha, double beta,
                                    const float* grad_out, const float* x, const float* y,
                                    const float* scale, float* grad_in) {
  const int64_t total = a.n * a.c * a.spatial;
  const double coeff = 2.0 * alpha * beta / static_cast<double>(size);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = i % a.spatial, c = (i / a.spatial) % a.c, n = i / (a.spatial * a.c);
    const int64_t lo = max(c - (size - 1) / 2, int64_t{0}), hi = min(c + size / 2, a.c - 1);
    double acc = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
      const int64_t q = (n * a.c + j) * a.spatial + s;
      acc += static_cast<double>(grad_out[q]) * y[q] / scale[q];
    }
    grad_in[i] = static_cast<float>(grad_out[i] * pow(static_cast<double>(scale[i]), -beta) -
                                    coeff * x[i] * acc);
  }
}

__global__ void dropout_mask_kernel(int64_t count, double p, PhiloxState state, float keep,
                                    float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<double>(philox_uniform(state, static_cast<uint64_t>(i))) < p ? 0.0f : keep;
}

}  // namespace

// ---- launchers
// ------------------------------------------------------------------------------------

void batch_norm_train_forward(const NormArgs& a, const float* x, const float* gamma,
                              const float* beta, float* running_mean, float* running_var,
                              double momentum, double eps, float* y, float* save_mean,
                              float* save_invstd, cudaStream_t stream) {
  if (a.c == 0) return;
  ECH_LAUNCH(static_cast<unsigned>(a.c), kBlock, 0, stream, batch_norm_train_kernel)
  (a, x, gamma, beta, running_mean, running_var, momentum, eps, y, save_mean, save_invstd);
  ECH_CUDA_CHECK_LAUNCH("batch_norm_train_forward");
}

void batch_norm_eval_forward(const NormArgs& a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var,
                             double eps, float* y, cudaStream_t stream) {
  launch_1d("batch_norm_eval_forward", a.n * a.c * a.spatial, stream, batch_norm_eval_kernel, a, x,
            gamma, beta, running_mean, running_var, eps, y);
}

void batch_norm_backward(const NormArgs& a, const float* grad_out, const float* x,
                         const float* gamma, const float* save_mean, const float* save_invstd,
                         float* grad_in, float* grad_gamma, float* grad_beta, cudaStream_t stream) {
  if (a.c == 0) return;
  ECH_LAUNCH(static_cast<unsigned>(a.c), kBlock, 0, stream, batch_norm_backward_kernel)
  (a, grad_out, x, gamma, save_mean, save_invstd, grad_in, grad_gamma, grad_beta);
  ECH_CUDA_CHECK_LAUNCH("batch_norm_backward");
}

void lrn_forward(const NormArgs& a, int64_t size, double alpha, double beta, double k,
                 const float* x, float* y, float* scale, cudaStream_t stream) {
  launch_1d("lrn_forward", a.n * a.c * a.spatial, stream, lrn_forward_kernel, a, size, alpha, beta,
            k, x, y, scale);
}

void lrn_backward(const NormArgs& a, int64_t size, double alpha, double beta, const float* grad_out,
                  const float* x, const float* y, const float* scale, float* grad_in,
                  cudaStream_t stream) {
  launch_1d("lrn_backward", a.n * a.c * a.spatial, stream, lrn_backward_kernel, a, size, alpha,
            beta, grad_out, x, y, scale, grad_in);
}

void dropout_mask(int64_t count, double p, PhiloxState state, float* out, cudaStream_t stream) {
  const float keep = p < 1.0 ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  launch_1d("dropout_mask", count, stream, dropout_mask_kernel, count, p, state, keep, out);
}

}  // namespace echelon::cuda
