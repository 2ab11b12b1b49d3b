// Normalisation kernels: batch norm, LRN, dropout mask. Why this shape: batch-norm statistics
// are per-channel reductions over N*S values. One block per channel would leave most SMs idle at
// 6..64 channels, so each channel is cut into chunks (cuda/kernels/channels.cuh), a 2-D grid:
//   forward  pass 1: per chunk, (count, mean, centred sum of squares) with CUB block sums in
//                    double (two passes over the chunk, like the CPU twin's two-pass formula);
//            pass 2: every block combines its channel's chunks in chunk order (Chan et al.'s
//                    parallel variance), then normalises its chunk; chunk 0 saves the statistics.
//   backward pass 1: per chunk, sum(dy) and sum(dy * xhat); pass 2: the same ordered combine,
//                    then grad_in for the chunk; chunk 0 writes grad_gamma / grad_beta.
// The fixed combination order makes the result deterministic. LRN and dropout are elementwise
// with a short channel window.
#include <echelon/cuda/kernels/norm.h>

#include <cub/block/block_reduce.cuh>

#include <echelon/cuda/launch.h>
#include <echelon/cuda/kernels/channels.cuh>

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

// Pass 1: partial (C, chunks) of {count, mean, centred sum of squares} over each chunk.
__global__ void batch_norm_stats_kernel(NormArgs a, ChannelChunks cc, const float* x,
                                        double* partial) {
  __shared__ BlockSum::TempStorage temp;
  __shared__ double shared;
  const int64_t c = blockIdx.y, begin = chunk_begin(cc), end = chunk_end(cc);
  double acc = 0.0;
  for (ChannelWalk w(a, c, begin + threadIdx.x, blockDim.x); w.i < end; w.advance())
    acc += x[w.offset()];
  const double count = static_cast<double>(end - begin);
  const double mean = block_sum(acc, temp, &shared) / count;
  acc = 0.0;
  for (ChannelWalk w(a, c, begin + threadIdx.x, blockDim.x); w.i < end; w.advance()) {
    const double d = x[w.offset()] - mean;
    acc += d * d;
  }
  const double m2 = block_sum(acc, temp, &shared);
  if (threadIdx.x == 0) {
    double* p = partial + (c * cc.chunks + blockIdx.x) * 3;
    p[0] = count, p[1] = mean, p[2] = m2;
  }
}

// Channel c's {count, mean, m2} from its chunks, combined in chunk order (deterministic).
__device__ void combine_stats(const double* partial, int chunks, double* out) {
  double count = partial[0], mean = partial[1], m2 = partial[2];
  for (int k = 1; k < chunks; ++k) {
    const double* p = partial + k * 3;
    const double total = count + p[0], delta = p[1] - mean;
    mean += delta * p[0] / total;
    m2 += p[2] + delta * delta * count * p[0] / total;
    count = total;
  }
  out[0] = count, out[1] = mean, out[2] = m2;
}

// Pass 2: combine the channel's statistics, normalise this chunk; chunk 0 saves them.
// The epilogue (relu; residual only with relu) runs on the stored float, in the composition's
// order: y = ReLU(float(batch norm) + residual), the same bits as the ops one after another.
__global__ void batch_norm_apply_kernel(NormArgs a, ChannelChunks cc, const float* x,
                                        const double* partial, const float* gamma,
                                        const float* beta, float* running_mean, float* running_var,
                                        double momentum, double eps, bool relu,
                                        const float* residual, float* y, float* save_mean,
                                        float* save_invstd) {
  __shared__ double stats[3];  // count, mean, m2
  const int64_t c = blockIdx.y;
  if (threadIdx.x == 0) combine_stats(partial + c * cc.chunks * 3, cc.chunks, stats);
  __syncthreads();
  const double count = stats[0], mean = stats[1], m2 = stats[2];
  const double invstd = rsqrt(m2 / count + eps);
  const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
  const int64_t end = chunk_end(cc);
  for (ChannelWalk w(a, c, chunk_begin(cc) + threadIdx.x, blockDim.x); w.i < end; w.advance()) {
    const int64_t j = w.offset();
    float v = static_cast<float>((x[j] - mean) * invstd * g + b);
    if (residual) v += residual[j];
    y[j] = relu && !(v > 0.0f) ? 0.0f : v;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    if (running_mean) {
      const double unbiased = m2 / (count - 1.0);
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

// relu_out (null: none): the fused ReLU's output; its backward masks dy where relu_out <= 0.
__device__ float masked_dy(const float* grad_out, const float* relu_out, int64_t j) {
  return relu_out && !(relu_out[j] > 0.0f) ? 0.0f : grad_out[j];
}

// Pass 1: partial (C, chunks) of {sum(dy), sum(dy * xhat)} over each chunk.
__global__ void batch_norm_backward_sums_kernel(NormArgs a, ChannelChunks cc, const float* grad_out,
                                                const float* relu_out, const float* x,
                                                const float* save_mean, const float* save_invstd,
                                                double* partial) {
  __shared__ BlockSum::TempStorage temp;
  __shared__ double shared;
  const int64_t c = blockIdx.y, end = chunk_end(cc);
  const double mean = save_mean[c], invstd = save_invstd[c];
  double acc_dy = 0.0, acc_dy_xhat = 0.0;
  for (ChannelWalk w(a, c, chunk_begin(cc) + threadIdx.x, blockDim.x); w.i < end; w.advance()) {
    const int64_t j = w.offset();
    const float dy = masked_dy(grad_out, relu_out, j);
    acc_dy += dy;
    acc_dy_xhat += dy * (x[j] - mean) * invstd;
  }
  const double sum_dy = block_sum(acc_dy, temp, &shared);
  const double sum_dy_xhat = block_sum(acc_dy_xhat, temp, &shared);
  if (threadIdx.x == 0) {
    double* p = partial + (c * cc.chunks + blockIdx.x) * 2;
    p[0] = sum_dy, p[1] = sum_dy_xhat;
  }
}

// Pass 2: the channel's sums in chunk order, grad_in for this chunk; chunk 0 writes the
// parameter gradients. masked (null: not asked for) receives the masked dy: the residual's
// gradient.
__global__ void batch_norm_backward_apply_kernel(
    NormArgs a, ChannelChunks cc, const float* grad_out, const float* relu_out, const float* x,
    const float* gamma, const float* save_mean, const float* save_invstd, const double* partial,
    float* grad_in, float* grad_gamma, float* grad_beta, float* masked) {
  __shared__ double sums[2];  // sum(dy), sum(dy * xhat)
  const int64_t c = blockIdx.y;
  if (threadIdx.x == 0) {
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int k = 0; k < cc.chunks; ++k) {
      sum_dy += partial[(c * cc.chunks + k) * 2];
      sum_dy_xhat += partial[(c * cc.chunks + k) * 2 + 1];
    }
    sums[0] = sum_dy, sums[1] = sum_dy_xhat;
  }
  __syncthreads();
  const double sum_dy = sums[0], sum_dy_xhat = sums[1];
  const double mean = save_mean[c], invstd = save_invstd[c];
  const double g = gamma ? gamma[c] : 1.0, m = static_cast<double>(cc.count);
  const int64_t end = chunk_end(cc);
  for (ChannelWalk w(a, c, chunk_begin(cc) + threadIdx.x, blockDim.x); w.i < end; w.advance()) {
    const int64_t j = w.offset();
    const double xhat = (x[j] - mean) * invstd;
    const float dy = masked_dy(grad_out, relu_out, j);
    if (masked) masked[j] = dy;
    grad_in[j] = static_cast<float>(g * invstd / m * (m * dy - sum_dy - xhat * sum_dy_xhat));
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
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
                              double momentum, double eps, bool relu, const float* residual,
                              float* y, float* save_mean, float* save_invstd, cudaStream_t stream) {
  if (a.c == 0) return;
  const ChannelChunks cc = channel_chunks(a);
  const dim3 grid = channel_grid(cc, a.c);
  Scratch partial(static_cast<size_t>(a.c * cc.chunks * 3) * sizeof(double), stream);
  ECH_LAUNCH(grid, kBlock, 0, stream, batch_norm_stats_kernel)(a, cc, x, partial.as<double>());
  ECH_CUDA_CHECK_LAUNCH("batch_norm_train_forward (statistics)");
  ECH_LAUNCH(grid, kBlock, 0, stream, batch_norm_apply_kernel)
  (a, cc, x, partial.as<double>(), gamma, beta, running_mean, running_var, momentum, eps, relu,
   residual, y, save_mean, save_invstd);
  ECH_CUDA_CHECK_LAUNCH("batch_norm_train_forward");
}

void batch_norm_eval_forward(const NormArgs& a, const float* x, const float* gamma,
                             const float* beta, const float* running_mean, const float* running_var,
                             double eps, float* y, cudaStream_t stream) {
  launch_1d("batch_norm_eval_forward", a.n * a.c * a.spatial, stream, batch_norm_eval_kernel, a, x,
            gamma, beta, running_mean, running_var, eps, y);
}

void batch_norm_backward(const NormArgs& a, const float* grad_out, const float* relu_out,
                         const float* x, const float* gamma, const float* save_mean,
                         const float* save_invstd, float* grad_in, float* grad_gamma,
                         float* grad_beta, float* masked, cudaStream_t stream) {
  if (a.c == 0) return;
  const ChannelChunks cc = channel_chunks(a);
  const dim3 grid = channel_grid(cc, a.c);
  Scratch partial(static_cast<size_t>(a.c * cc.chunks * 2) * sizeof(double), stream);
  ECH_LAUNCH(grid, kBlock, 0, stream, batch_norm_backward_sums_kernel)
  (a, cc, grad_out, relu_out, x, save_mean, save_invstd, partial.as<double>());
  ECH_CUDA_CHECK_LAUNCH("batch_norm_backward (sums)");
  ECH_LAUNCH(grid, kBlock, 0, stream, batch_norm_backward_apply_kernel)
  (a, cc, grad_out, relu_out, x, gamma, save_mean, save_invstd, partial.as<double>(), grad_in,
   grad_gamma, grad_beta, masked);
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
