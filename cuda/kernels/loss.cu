// Cross-entropy fused with log-softmax. Why: one block per row finds the row max and the sum of
// exponentials (CUB block reductions, in double like the CPU twin), so no exp overflows and the
// log-probabilities are written once; a second one-block kernel averages the row losses in a
// fixed order (deterministic). A bad target is reported through a device word holding the first
// offending row, read back by the launcher; with deferred target checks a one-thread kernel
// publishes it instead into a per-device record in pinned host memory (with unified addressing
// a kernel writes cudaHostAlloc memory directly), read later by check_deferred_target_errors:
// no synchronisation in the step, like a CUDA device-side assert.
#include <echelon/cuda/kernels/loss.h>

#include <array>
#include <atomic>
#include <mutex>

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
      // NaN: with deferred checks the step's loss then stops its SGD update (sgd_step's guard).
      row_loss[row] = NAN;
    } else {
      row_loss[row] = log_sum - in[t];
    }
  }
}

// The first bad target a deferred check saw on a device; row -1: none.
struct TargetErrorRecord {
  int64_t row, value, classes;
};

// Copies this launch's first bad row (if any) into the record unless it holds one already.
// Plain stores: no atomics on host memory over the bus.
__global__ void publish_bad_target_kernel(const unsigned long long* bad_row, const int64_t* target,
                                          int64_t classes, TargetErrorRecord* record_in) {
  volatile TargetErrorRecord* record = record_in;  // host memory the host polls
  const unsigned long long row = *bad_row;
  if (row == ~0ull || record->row >= 0) return;
  record->value = target[row];
  record->classes = classes;
  __threadfence_system();  // value and classes land before the row that marks them valid
  record->row = static_cast<int64_t>(row);
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

std::atomic<bool> g_deferred_checks{false};
constexpr int kMaxDevices = 64;
std::mutex g_records_mutex;
std::array<TargetErrorRecord*, kMaxDevices> g_records{};  // pinned, allocated on first use

TargetErrorRecord* target_error_record(int device) {
  ECH_CHECK(device >= 0 && device < kMaxDevices, "cross_entropy: device ", device, " out of range");
  std::lock_guard lock(g_records_mutex);
  if (!g_records[device]) {
    void* p = nullptr;
    ECH_CUDA_CHECK(cudaHostAlloc(&p, sizeof(TargetErrorRecord), cudaHostAllocPortable));
    auto* record = static_cast<TargetErrorRecord*>(p);
    record->row = -1, record->value = 0, record->classes = 0;
    g_records[device] = record;
  }
  return g_records[device];
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
    if (deferred_target_checks()) {
      ECH_LAUNCH(1, 1, 0, stream, publish_bad_target_kernel)
      (bad, target, classes, target_error_record(device));
      ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward (deferred target check)");
      device_free(device, scratch);  // stream-ordered: reused only after these kernels
      return -1;
    }
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

void set_deferred_target_checks(bool on) {
  g_deferred_checks.store(on);
}

bool deferred_target_checks() {
  return g_deferred_checks.load();
}

void check_deferred_target_errors() {
  std::lock_guard lock(g_records_mutex);
  for (int device = 0; device < kMaxDevices; ++device) {
    volatile TargetErrorRecord* record = g_records[device];
    if (!record || record->row < 0) continue;
    const int64_t row = record->row, value = record->value, classes = record->classes;
    record->row = -1;
    ECH_FAIL("cross_entropy: target[", row, "] = ", value, " is not a class index in [0, ", classes,
             ") (cuda:", device, ", found by a deferred target check)");
  }
}

void cross_entropy_backward(int64_t n, int64_t classes, const float* grad_loss,
                            const float* log_probs, const int64_t* target, float* grad_logits,
                            cudaStream_t stream) {
  launch_1d("cross_entropy_backward", n * classes, stream, cross_entropy_backward_kernel, n,
            classes, grad_loss, log_probs, target, grad_logits);
}

}  // namespace echelon::cuda
