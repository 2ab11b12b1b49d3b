// Cross-entropy fused with log-softmax, in double like the CPU twin (tensor/cpu/loss.cpp,
// cpu::cross_entropy_forward / cpu::cross_entropy_backward): each row's max and sum of
// exponentials, so no exp overflows and the log-probabilities are written once; the mean of the
// row losses in a fixed order (deterministic for a given shape). Two paths:
// - a batch small enough for one block (LeNet-5's 128 x 10: cross_entropy_one_block_fits) is one
//   kernel: `lanes` adjacent lanes (a power of two up to a warp) take a row, the block adds the
//   rows' losses and finds the first bad target itself. A training step's loss is then one launch
//   where it was a memset and three kernels; asked for it, the kernel also writes the logits'
//   gradient for a unit loss gradient, which autograd hands on when the backward starts from the
//   loss with the shared seed 1: no backward launch;
// - otherwise one block per row (CUB block reductions), then a one-block kernel that averages the
//   row losses and finds the first bad target by scanning the targets.
// A bad target is reported through a device word holding the first offending row, read back by
// the launcher; with deferred target checks the last kernel publishes it instead into a
// per-device record in pinned host memory (with unified addressing a kernel writes
// cudaHostAlloc memory directly), read later by check_deferred_target_errors: no synchronisation
// in the step, like a CUDA device-side assert.
#include <echelon/cuda/kernels/loss.h>

#include <array>
#include <atomic>
#include <mutex>

#include <cub/block/block_reduce.cuh>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/launch.h>

// Quoted: tools/cudasim-mutants.sh plants bugs in a copy of the kernels folder, this included.
#include "arg_best.cuh"

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

using BlockReduce = cub::BlockReduce<double, kBlock>;
using BlockReduceRow = cub::BlockReduce<unsigned long long, kBlock>;
constexpr unsigned long long kNoBadRow = ~0ull;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kOneBlockThreads = 512;         // 1024 would cap a thread at 64 registers: it spilled
constexpr int64_t kOneBlockMostPerLane = 16;  // logits a lane reads, at most
constexpr int64_t kRowPerLane = 4;            // of a row's, where 32 lanes suffice

struct MaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct MinRowOp {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a < b ? a : b;
  }
};

// The first bad target a deferred check saw on a device; row -1: none.
struct TargetErrorRecord {
  int64_t row, value, classes;
};

// Copies a launch's first bad row (kNoBadRow: none) into the record unless it holds one already.
// Plain stores: no atomics on host memory over the bus.
__device__ void publish_bad_target(unsigned long long row, const int64_t* target, int64_t classes,
                                   TargetErrorRecord* record_in) {
  volatile TargetErrorRecord* record = record_in;  // host memory the host polls
  if (row == kNoBadRow || record->row >= 0) return;
  record->value = target[row];
  record->classes = classes;
  __threadfence_system();  // value and classes land before the row that marks them valid
  record->row = static_cast<int64_t>(row);
}

// Lanes per row of the one-block kernel: a power of two up to a warp, so that a lane reads at
// most kRowPerLane logits of a row. Few lanes per row, many rows per pass: a pass is a chain of
// load, shuffle and exp latencies, and a lane's few logits load and exponentiate side by side
// (LeNet-5's 128 x 10: 4 lanes of 3 logits, all 128 rows in one pass).
int lanes_per_row(int64_t classes) {
  int lanes = 1;
  while (lanes * kRowPerLane < classes && lanes < 32) lanes *= 2;
  return lanes;
}

// The gradient of a logit for a unit loss gradient: cross_entropy_backward_kernel's arithmetic
// with grad_loss[0] = 1, so that both give the same bits.
__device__ __forceinline__ float unit_gradient(float log_prob, bool is_target, float inv_n) {
  return (expf(log_prob) - (is_target ? 1.0f : 0.0f)) * inv_n;
}

// The step's statistics a one-block loss may count too (ops::step_statistics'): correct[0] = the
// rows whose argmax is their target, guard[0] += 0 * loss[0]; both null: not counted.
struct Statistics {
  float* correct;
  float* guard;
};

// logits (n, classes) -> log_probs (n, classes), loss[0] = the mean row loss (NaN if a target is
// bad), unit_grad (n, classes) = the logits' gradient for a unit loss gradient (when given), the
// statistics (when given), bad_row[0] = the first bad row or kNoBadRow (when bad_row is given),
// and the first bad row published into `record` (when given). One block of kOneBlockThreads; the
// rows go by passes of blockDim / lanes so that every lane of a warp takes part in every shuffle.
__global__ void __launch_bounds__(kOneBlockThreads)
    cross_entropy_one_block_kernel(int n, int classes, int lanes, const float* logits,
                                   const int64_t* target, float* log_probs, float* unit_grad,
                                   Statistics statistics, float* loss, unsigned long long* bad_row,
                                   TargetErrorRecord* record) {
  __shared__ double warp_loss[kOneBlockThreads / 32];
  __shared__ unsigned long long warp_bad[kOneBlockThreads / 32];
  __shared__ int warp_hits[kOneBlockThreads / 32];
  const int lane = static_cast<int>(threadIdx.x) % lanes, group = threadIdx.x / lanes;
  const int groups = blockDim.x / lanes;
  const bool count = statistics.correct != nullptr;
  double loss_sum = 0.0;  // this group's rows, in row order
  unsigned long long first_bad = kNoBadRow;
  int hits = 0;  // this group's rows whose argmax is the target (lane 0's count)
  for (int base = 0; base < n; base += groups) {
    const int row = base + group;
    const bool valid = row < n;
    const float* in = logits + static_cast<int64_t>(valid ? row : 0) * classes;
    double row_max = -INFINITY;
    ArgBest best{-INFINITY, INT64_MAX};  // an idle lane's candidate loses every tie
    if (valid)
      for (int j = lane; j < classes; j += lanes) {
        row_max = fmax(row_max, in[j]);
        if (count) best = better(best, ArgBest{in[j], j});
      }
    for (int offset = lanes / 2; offset > 0; offset /= 2) {
      row_max = fmax(row_max, __shfl_xor_sync(kFullMask, row_max, offset));
      if (count)
        best = better(best, ArgBest{__shfl_xor_sync(kFullMask, best.value, offset),
                                    __shfl_xor_sync(kFullMask, best.index, offset)});
    }
    double sum = 0.0;
    if (valid)
      for (int j = lane; j < classes; j += lanes) sum += exp(in[j] - row_max);
    for (int offset = lanes / 2; offset > 0; offset /= 2)
      sum += __shfl_xor_sync(kFullMask, sum, offset);
    if (!valid) continue;
    const double log_sum = row_max + log(sum);
    const int64_t t = target[row];
    const int64_t at = static_cast<int64_t>(row) * classes;
    const float inv_n = 1.0f / static_cast<float>(n);
    for (int j = lane; j < classes; j += lanes) {
      const float log_prob = static_cast<float>(in[j] - log_sum);
      log_probs[at + j] = log_prob;
      if (unit_grad) unit_grad[at + j] = unit_gradient(log_prob, t == j, inv_n);
    }
    if (lane != 0) continue;
    hits += count && best.index == t ? 1 : 0;
    if (t < 0 || t >= classes) {
      first_bad = min(first_bad, static_cast<unsigned long long>(row));
      loss_sum += NAN;  // with deferred checks the NaN loss stops sgd_step's update
    } else {
      loss_sum += log_sum - in[t];
    }
  }
  // The block's sums in a fixed order: a shuffle tree per warp, then the warps in order.
  for (int offset = 16; offset > 0; offset /= 2) {
    loss_sum += __shfl_down_sync(kFullMask, loss_sum, offset);
    first_bad = min(first_bad, __shfl_down_sync(kFullMask, first_bad, offset));
    hits += __shfl_down_sync(kFullMask, hits, offset);
  }
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0)
    warp_loss[warp] = loss_sum, warp_bad[warp] = first_bad, warp_hits[warp] = hits;
  __syncthreads();
  if (threadIdx.x != 0) return;
  double total = 0.0;
  for (int w = 0; w < warps; ++w) {
    total += warp_loss[w];
    first_bad = min(first_bad, warp_bad[w]);
    if (w > 0) hits += warp_hits[w];
  }
  loss[0] = static_cast<float>(total / static_cast<double>(n));
  if (count) {
    *statistics.correct = static_cast<float>(hits);
    *statistics.guard = *statistics.guard + 0.0f * loss[0];
  }
  if (bad_row) *bad_row = first_bad;
  if (record) publish_bad_target(first_bad, target, classes, record);
}

// One block per row: log_probs of the row and its loss (NaN for a bad target).
__global__ void cross_entropy_rows_kernel(int64_t classes, const float* logits,
                                          const int64_t* target, float* log_probs,
                                          double* row_loss) {
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
    row_loss[row] = t < 0 || t >= classes ? NAN : log_sum - in[t];
  }
}

// loss[0] = the mean of the row losses; the first bad target's row into bad_row / the record.
__global__ void mean_and_first_bad_kernel(int64_t n, int64_t classes, const double* row_loss,
                                          const int64_t* target, float* loss,
                                          unsigned long long* bad_row, TargetErrorRecord* record) {
  __shared__ BlockReduce::TempStorage temp;
  __shared__ BlockReduceRow::TempStorage temp_row;
  double acc = 0.0;
  unsigned long long first_bad = kNoBadRow;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    acc += row_loss[i];
    if ((target[i] < 0 || target[i] >= classes) && first_bad == kNoBadRow)
      first_bad = static_cast<unsigned long long>(i);  // a thread's rows ascend: its first
  }
  const double total = BlockReduce(temp).Sum(acc);
  first_bad = BlockReduceRow(temp_row).Reduce(first_bad, MinRowOp());
  if (threadIdx.x != 0) return;
  loss[0] = static_cast<float>(total / static_cast<double>(n));
  if (bad_row) *bad_row = first_bad;
  if (record) publish_bad_target(first_bad, target, classes, record);
}

__global__ void cross_entropy_backward_kernel(int64_t n, int64_t classes, const float* grad_loss,
                                              const float* log_probs, const int64_t* target,
                                              float* grad_logits) {
  const float scale = grad_loss[0] / static_cast<float>(n);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n * classes;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    grad_logits[i] = unit_gradient(log_probs[i], target[i / classes] == i % classes, scale);
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

// ---- launchers ---------------------------------------------------------------------------------

bool cross_entropy_one_block_fits(int64_t n, int64_t classes) {
  const int64_t lanes = lanes_per_row(classes);
  const int64_t passes = (n * lanes + kOneBlockThreads - 1) / kOneBlockThreads;
  return n > 0 && classes > 0 && passes * ((classes + lanes - 1) / lanes) <= kOneBlockMostPerLane;
}

int64_t cross_entropy_forward(int64_t n, int64_t classes, const float* logits,
                              const int64_t* target, float* log_probs, float* loss, int device,
                              cudaStream_t stream, float* unit_grad, float* correct, float* guard) {
  if (n == 0) return -1;
  const bool deferred = deferred_target_checks();
  TargetErrorRecord* record = deferred ? target_error_record(device) : nullptr;
  const bool one_block = cross_entropy_one_block_fits(n, classes);
  ECH_CHECK((!unit_grad && !correct) || one_block,
            "cross_entropy_forward: only the one-block kernel writes the unit gradient and the "
            "statistics; logits (",
            n, ", ", classes, ") take the per-row kernels");
  ECH_CHECK(!correct == !guard,
            "cross_entropy_forward: the statistics need both correct and guard");
  // Scratch: the bad-row word (unless deferred), then the per-row losses (the per-row path).
  const size_t words = (deferred ? 0 : 1) + (one_block ? 0 : static_cast<size_t>(n));
  void* scratch = words ? device_malloc(device, words * sizeof(double), stream) : nullptr;
  auto* bad = deferred ? nullptr : static_cast<unsigned long long*>(scratch);
  auto* row_loss = static_cast<double*>(scratch) + (deferred ? 0 : 1);
  unsigned long long bad_host = kNoBadRow;
  try {
    if (one_block) {
      ECH_LAUNCH(1, kOneBlockThreads, 0, stream, cross_entropy_one_block_kernel)
      (static_cast<int>(n), static_cast<int>(classes), lanes_per_row(classes), logits, target,
       log_probs, unit_grad, Statistics{correct, guard}, loss, bad, record);
      ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward (one block)");
    } else {
      ECH_LAUNCH(static_cast<unsigned>(n), kBlock, 0, stream, cross_entropy_rows_kernel)
      (classes, logits, target, log_probs, row_loss);
      ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward (rows)");
      ECH_LAUNCH(1, kBlock, 0, stream, mean_and_first_bad_kernel)
      (n, classes, row_loss, target, loss, bad, record);
      ECH_CUDA_CHECK_LAUNCH("cross_entropy_forward (mean)");
    }
    if (!deferred) {
      ECH_CUDA_CHECK(
          cudaMemcpyAsync(&bad_host, bad, sizeof(bad_host), cudaMemcpyDeviceToHost, stream));
      ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  } catch (...) {
    if (scratch) device_free(device, scratch);
    throw;
  }
  if (scratch) device_free(device, scratch);  // stream-ordered: reused only after these kernels
  return bad_host == kNoBadRow ? -1 : static_cast<int64_t>(bad_host);
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
