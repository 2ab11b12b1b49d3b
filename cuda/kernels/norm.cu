// Normalisation kernels: batch norm, LRN, dropout mask. Why this shape: batch-norm statistics
// are per-channel reductions over N*S values. One block per channel would leave most SMs idle at
// 6..64 channels, so each channel is cut into chunks (cuda/kernels/channels.cuh), a 2-D grid:
//   forward  pass 1: per chunk, (count, mean, centred sum of squares) in one read, from double
//                    sums of x - shift (shift: the chunk's first value, so no cancellation
//                    unless a chunk's spread dwarfs its distance to that value);
//            pass 2: warp 0 of every block combines its channel's chunks (Chan et al.'s parallel
//                    variance: lane l takes chunks l, l + 32, ... in order, then a fixed shuffle
//                    tree), then the block normalises its chunk; chunk 0 saves the statistics.
//   backward pass 1: per chunk, sum(dy) and sum(dy * xhat); with the fused ReLU it also writes
//                    the masked dy (to `masked` or a scratch tensor) so that pass 2 reads one
//                    tensor instead of two; pass 2: the same fixed-tree combine, then grad_in.
// The fixed combination order makes the result deterministic (bitwise, run to run).
// Bytes moved (what bench/exp_gpu_kernels counts): forward reads x twice and writes y once, 3n
// floats, its count, so ~0.9 of a copy is reachable; backward reads dy and x twice and writes
// grad_in, 5n floats against the 4n the bench counts: 0.8 of a copy at most (the statistics
// need all of x before any grad_in, and 2n floats do not fit on chip). Fused ReLU backward:
// pass 1 reads dy, relu_out, x and writes masked (4n), pass 2 reads masked, x and writes grad_in
// (3n): 7n, against the composition's 8n (the ReLU backward 3n, then 5n).
// Every pass walks float4s when S % 4 == 0 and the pointers are 16-byte aligned, issuing
// kChannelUnroll loads per thread before using them (channels.cuh); floats otherwise.
// LRN and dropout are elementwise with a short channel window.
#include <echelon/cuda/kernels/norm.h>

#include <cub/block/block_reduce.cuh>

#include <echelon/cuda/launch.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "channels.cuh"

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

using BlockSum = cub::BlockReduce<double, kBlock>;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// The block's sums of a and b, valid in thread 0 only (CUB's contract): the callers write their
// partials from thread 0, so nothing is broadcast.
__device__ void block_sums(double a, double b, BlockSum::TempStorage& temp, double& sum_a,
                           double& sum_b) {
  sum_a = BlockSum(temp).Sum(a);
  __syncthreads();  // the second reduction reuses temp
  sum_b = BlockSum(temp).Sum(b);
}

// Pass 1: partial (C, chunks) of {count, mean, centred sum of squares} over each chunk.
template <int W>
__global__ void __launch_bounds__(kBlock)
    batch_norm_stats_kernel(NormArgs a, ChannelChunks cc, const float* x, double* partial) {
  using V = ChannelVec<W>;
  __shared__ BlockSum::TempStorage temp;
  const int64_t c = blockIdx.y, begin = chunk_begin(cc), end = chunk_end(cc);
  const double shift = x[channel_offset(a, c, begin)];  // one address: a broadcast load
  double sum = 0.0, squares = 0.0;
  for_chunk<W>(a, cc, c,
               [&](const int64_t(&at)[kChannelUnroll], const bool(&live)[kChannelUnroll]) {
                 typename V::type v[kChannelUnroll];
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k]) v[k] = V::load(x, at[k]);
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k])
#pragma unroll
                     for (int l = 0; l < W; ++l) {
                       const double d = lane_of(v[k], l) - shift;
                       sum += d;
                       squares += d * d;
                     }
               });
  const double count = static_cast<double>(end - begin);
  double total, total_squares;
  block_sums(sum, squares, temp, total, total_squares);
  if (threadIdx.x == 0) {
    double* p = partial + (c * cc.chunks + blockIdx.x) * 3;
    p[0] = count, p[1] = shift + total / count;
    p[2] = max(total_squares - total * total / count, 0.0);
  }
}

// (count, mean, m2) += another part's, Chan et al.; an empty part changes nothing.
__device__ __forceinline__ void merge_stats(double& count, double& mean, double& m2,
                                            double other_count, double other_mean,
                                            double other_m2) {
  if (other_count == 0.0) return;
  if (count == 0.0) {
    count = other_count, mean = other_mean, m2 = other_m2;
    return;
  }
  const double total = count + other_count, delta = other_mean - mean;
  mean += delta * other_count / total;
  m2 += other_m2 + delta * delta * count * other_count / total;
  count = total;
}

// Channel c's {count, mean, m2} from its chunks (partial + k * 3), by warp 0 in a fixed order:
// lane l merges chunks l, l + 32, ... then a shuffle tree; out (shared) from lane 0.
__device__ void combine_stats_warp(const double* partial, int chunks, double* out) {
  const int lane = threadIdx.x % kWarp;
  double count = 0.0, mean = 0.0, m2 = 0.0;
  for (int k = lane; k < chunks; k += kWarp)
    merge_stats(count, mean, m2, partial[k * 3], partial[k * 3 + 1], partial[k * 3 + 2]);
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const double other_count = __shfl_down_sync(kFullMask, count, offset);
    const double other_mean = __shfl_down_sync(kFullMask, mean, offset);
    const double other_m2 = __shfl_down_sync(kFullMask, m2, offset);
    merge_stats(count, mean, m2, other_count, other_mean, other_m2);
  }
  if (lane == 0) out[0] = count, out[1] = mean, out[2] = m2;
}

// sum over the chunks of partial[k * 2 + j] (j = 0, 1), by warp 0 in the same fixed order.
__device__ void combine_sums_warp(const double* partial, int chunks, double* out) {
  const int lane = threadIdx.x % kWarp;
  double a = 0.0, b = 0.0;
  for (int k = lane; k < chunks; k += kWarp) a += partial[k * 2], b += partial[k * 2 + 1];
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    a += __shfl_down_sync(kFullMask, a, offset);
    b += __shfl_down_sync(kFullMask, b, offset);
  }
  if (lane == 0) out[0] = a, out[1] = b;
}

// Pass 2: combine the channel's statistics, normalise this chunk; chunk 0 saves them.
// The epilogue (relu; residual only with relu) runs on the stored float, in the composition's
// order: y = ReLU(float(batch norm) + residual), the same bits as the ops one after another.
template <int W>
__global__ void __launch_bounds__(kBlock)
    batch_norm_apply_kernel(NormArgs a, ChannelChunks cc, const float* x, const double* partial,
                            const float* gamma, const float* beta, float* running_mean,
                            float* running_var, double momentum, double eps, bool relu,
                            const float* residual, float* y, float* save_mean, float* save_invstd) {
  using V = ChannelVec<W>;
  __shared__ double stats[3];  // count, mean, m2
  const int64_t c = blockIdx.y;
  if (threadIdx.x < kWarp) combine_stats_warp(partial + c * cc.chunks * 3, cc.chunks, stats);
  __syncthreads();
  const double count = stats[0], mean = stats[1], m2 = stats[2];
  const double invstd = rsqrt(m2 / count + eps);
  const double g = gamma ? gamma[c] : 1.0, b = beta ? beta[c] : 0.0;
  for_chunk<W>(a, cc, c,
               [&](const int64_t(&at)[kChannelUnroll], const bool(&live)[kChannelUnroll]) {
                 typename V::type v[kChannelUnroll], r[kChannelUnroll];
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k]) {
                     v[k] = V::load(x, at[k]);
                     if (residual) r[k] = V::load(residual, at[k]);
                   }
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k]) {
#pragma unroll
                     for (int l = 0; l < W; ++l) {
                       float out = static_cast<float>((lane_of(v[k], l) - mean) * invstd * g + b);
                       if (residual) out += lane_of(r[k], l);
                       set_lane(v[k], l, relu && !(out > 0.0f) ? 0.0f : out);
                     }
                     V::store(y, at[k], v[k]);
                   }
               });
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

// Pass 1: partial (C, chunks) of {sum(dy), sum(dy * xhat)} over each chunk. relu_out (null:
// none) is the fused ReLU's output: dy is masked where relu_out <= 0 (or NaN) and written to
// masked for pass 2. Both operands are loaded unconditionally: a load of dy that waited for
// relu_out's value serialised two memory latencies per element (why the fused pair ran at 0.82x
// the composition on the H200).
template <int W>
__global__ void __launch_bounds__(kBlock)
    batch_norm_backward_sums_kernel(NormArgs a, ChannelChunks cc, const float* grad_out,
                                    const float* relu_out, const float* x, const float* save_mean,
                                    const float* save_invstd, float* masked, double* partial) {
  using V = ChannelVec<W>;
  __shared__ BlockSum::TempStorage temp;
  const int64_t c = blockIdx.y;
  const double mean = save_mean[c], invstd = save_invstd[c];
  double acc_dy = 0.0, acc_dy_xhat = 0.0;
  for_chunk<W>(a, cc, c,
               [&](const int64_t(&at)[kChannelUnroll], const bool(&live)[kChannelUnroll]) {
                 typename V::type dy[kChannelUnroll], r[kChannelUnroll], v[kChannelUnroll];
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k]) {
                     dy[k] = V::load(grad_out, at[k]);
                     if (relu_out) r[k] = V::load(relu_out, at[k]);
                     v[k] = V::load(x, at[k]);
                   }
#pragma unroll
                 for (int k = 0; k < kChannelUnroll; ++k)
                   if (live[k]) {
#pragma unroll
                     for (int l = 0; l < W; ++l) {
                       float d = lane_of(dy[k], l);
                       if (relu_out && !(lane_of(r[k], l) > 0.0f)) d = 0.0f;
                       set_lane(dy[k], l, d);
                       acc_dy += d;
                       acc_dy_xhat += d * (lane_of(v[k], l) - mean) * invstd;
                     }
                     if (relu_out) V::store(masked, at[k], dy[k]);
                   }
               });
  double sum_dy, sum_dy_xhat;
  block_sums(acc_dy, acc_dy_xhat, temp, sum_dy, sum_dy_xhat);
  if (threadIdx.x == 0) {
    double* p = partial + (c * cc.chunks + blockIdx.x) * 2;
    p[0] = sum_dy, p[1] = sum_dy_xhat;
  }
}

// Pass 2: the channel's sums (fixed tree), grad_in for this chunk from dy (grad_out, or pass 1's
// masked dy with the fused ReLU); chunk 0 writes the parameter gradients.
template <int W>
__global__ void __launch_bounds__(kBlock)
    batch_norm_backward_apply_kernel(NormArgs a, ChannelChunks cc, const float* dy_in,
                                     const float* x, const float* gamma, const float* save_mean,
                                     const float* save_invstd, const double* partial,
                                     float* grad_in, float* grad_gamma, float* grad_beta) {
  using V = ChannelVec<W>;
  __shared__ double sums[2];  // sum(dy), sum(dy * xhat)
  const int64_t c = blockIdx.y;
  if (threadIdx.x < kWarp) combine_sums_warp(partial + c * cc.chunks * 2, cc.chunks, sums);
  __syncthreads();
  const double sum_dy = sums[0], sum_dy_xhat = sums[1];
  const double mean = save_mean[c], invstd = save_invstd[c];
  const double g = gamma ? gamma[c] : 1.0, m = static_cast<double>(cc.count);
  for_chunk<W>(
      a, cc, c, [&](const int64_t(&at)[kChannelUnroll], const bool(&live)[kChannelUnroll]) {
        typename V::type dy[kChannelUnroll], v[kChannelUnroll];
#pragma unroll
        for (int k = 0; k < kChannelUnroll; ++k)
          if (live[k]) dy[k] = V::load(dy_in, at[k]), v[k] = V::load(x, at[k]);
#pragma unroll
        for (int k = 0; k < kChannelUnroll; ++k)
          if (live[k]) {
#pragma unroll
            for (int l = 0; l < W; ++l) {
              const double xhat = (lane_of(v[k], l) - mean) * invstd;
              const double d = lane_of(dy[k], l);
              set_lane(v[k], l,
                       static_cast<float>(g * invstd / m * (m * d - sum_dy - xhat * sum_dy_xhat)));
            }
            V::store(grad_in, at[k], v[k]);
          }
      });
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
  const bool vec = channel_vectorisable(a, {x, residual, y});
  const auto stats = vec ? batch_norm_stats_kernel<kChannelVec> : batch_norm_stats_kernel<1>;
  const auto apply = vec ? batch_norm_apply_kernel<kChannelVec> : batch_norm_apply_kernel<1>;
  ECH_LAUNCH(grid, kBlock, 0, stream, stats)(a, cc, x, partial.as<double>());
  ECH_CUDA_CHECK_LAUNCH("batch_norm_train_forward (statistics)");
  ECH_LAUNCH(grid, kBlock, 0, stream, apply)
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
  // The fused ReLU's masked dy, pass 1 -> pass 2: the caller's `masked`, or scratch (N, C, S).
  const size_t elements = static_cast<size_t>(a.n * a.c * a.spatial);
  Scratch own_masked(relu_out && !masked ? elements * sizeof(float) : 0, stream);
  float* masked_dy = relu_out ? (masked ? masked : own_masked.as<float>()) : nullptr;
  const float* dy = relu_out ? masked_dy : grad_out;
  const bool vec = channel_vectorisable(a, {grad_out, relu_out, x, grad_in, masked_dy});
  const auto sums =
      vec ? batch_norm_backward_sums_kernel<kChannelVec> : batch_norm_backward_sums_kernel<1>;
  const auto apply =
      vec ? batch_norm_backward_apply_kernel<kChannelVec> : batch_norm_backward_apply_kernel<1>;
  ECH_LAUNCH(grid, kBlock, 0, stream, sums)
  (a, cc, grad_out, relu_out, x, save_mean, save_invstd, masked_dy, partial.as<double>());
  ECH_CUDA_CHECK_LAUNCH("batch_norm_backward (sums)");
  ECH_LAUNCH(grid, kBlock, 0, stream, apply)
  (a, cc, dy, x, gamma, save_mean, save_invstd, partial.as<double>(), grad_in, grad_gamma,
   grad_beta);
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
