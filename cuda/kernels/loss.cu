// Cross-entropy fused with log-softmax. Why: one block per row finds the row max and the sum of
// exponentials (CUB block reductions, in double like the CPU twin), so no exp overflows and the
// log-probabilities are written once; a second one-block kernel averages the row losses in a
// fixed order (deterministic). A bad target is reported through a device word holding the first
// offending row, read back by the launcher.
#include <echelon/cuda/kernels/loss.h>

#include <cub/block/block_reduce.cuh>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/launch.h>

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

using BlockReduce = cub::BlockReduce<double, kBlock>;

struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

__global__ void cross_entropy_rows_kernel(int64_t classes, const float* logits,
                                          const int64_t* target, float* log_probs, double* row_loss,
                                          unsigned long long* bad_row) {
  __shared__ BlockReduce::TempStorage temp;
  __shared__ double shared;
  const int64_t row = blockIdx.x;
  const float* in = logits + row * classes;
  double local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) local_max = fmax(local_max, in[j]);
  const double row_max_all = BlockReduce(temp).Reduce(local_max, MaxOp());
  if (threadIdx.x == 0) shared = row_max_all;
  __syncthreads();
  const double row_max = shared;
  __syncthreads();
  double local_sum = 0.0;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) local_sum += exp(in[j] - row_max);
  const double sum_all = BlockReduce(temp).Sum(local_sum);
  if (threadIdx.x == 0) shared = row_max + log(sum_all);
  __syncthreads();
  const double log_sum = shared;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
    log_probs[row * classes + j] = static_cast<float>(in[j] - log_sum);
  if (threadIdx.x == 0) {
    const int64_t t = target[row];
    if (t < 0 || t >= classes) {
      atomicMin(bad_row, static_cast<unsigned long long>(row));
      row_loss[row] = 0.0;
    } else {
      row_loss[row] = log_sum - in[t];
    }
  }
}

__global__ void mean_kernel(int64_t n, const double* row_loss, float* loss) {
  __shared__ BlockReduce::TempStorage temp;
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  const double total = BlockReduce(temp).Sum(acc);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(total / static_cast<double>(n));
}

__global__ void cross_entropy_backward_kernel(int64_t n, int64_t classes, const float* grad_loss,
                                              const float* log_probs, const int64_t* target,
                                              float* grad_logits) {
  const float scale = grad_loss[0] / static_cast<float>(n);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * classes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float one_hot = target[i / classes] == i % classes ? 1.0f : 0.0f;
    grad_logits[i] = (expf(log_probs[i]) - one_hot) * scale;
  }
}

}  // namespace

// ---- launchers
// ------------------------------------------------------------------------------------

int64_t cross_entropy_forward(int64_t n, int64_t classes, const float* logits,
                              const int64_t* target, float* log_probs, float* loss, int device,
                              cudaStream_t stream) {
  if (n == 0) return -1;
  // One scratch block: the bad-row word, then the per-row losses.
  const size_t bytes = sizeof(unsigned long long) + static_cast<size_t>(n) * sizeof(double);
  void* scratch = device_malloc(device, bytes, stream);
  auto* bad = static_cast<unsigned long long*>(scratch);
  auto* row_loss = reinterpret_cast<double*>(bad + 1);
  unsigned long long bad_host = ~0ull;
  try {
    ECH_CUDA_CHECK(cudaMemsetAsync(bad, 0xFF, sizeof(unsigned long long), stream));
    ECH_LAUNCH(static_cast<unsigned>(n), kBlock, 0, stream, cross_entropy_rows_kernel)
    (classes, logits, target, log_probs, row_loss, bad);
    ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward");
    ECH_LAUNCH(1, kBlock, 0, stream, mean_kernel)(n, row_loss, loss);
    ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward (mean)");
    ECH_CUDA_CHECK(
        cudaMemcpyAsync(&bad_host, bad, sizeof(bad_host), cudaMemcpyDeviceToHost, stream));
    ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  } catch (...) {
    device_free(device, scratch);
    throw;
  }
  device_free(device, scratch);
  return bad_host == ~0ull ? -1 : static_cast<int64_t>(bad_host);
}

void cross_entropy_backward(int64_t n, int64_t classes, const float* grad_loss,
                            const float* log_probs, const int64_t* target, float* grad_logits,
                            cudaStream_t stream) {
  launch_1d("cross_entropy_backward", n * classes, stream, cross_entropy_backward_kernel, n,
            classes, grad_loss, log_probs, target, grad_logits);
}

}  // namespace echelon::cuda
