// Optimizer kernels. Why: an update is elementwise over a parameter, so one pass reads param,
// grad and the momentum buffer once and writes them back (PyTorch SGD semantics). sgd_steps
// updates a list of parameters in one launch (PyTorch's multi_tensor_apply): a training step's
// parameters are many small tensors (LeNet-5: 10, ResNet-20: 65), and on a GPU whose step is
// launch-bound each launch costs more than its few KiB of traffic. CPU twin: cpu::sgd_step
// (tensor/cpu/optim.cpp), per parameter; both kernels run update() below, so they give the same
// bits.
#include <echelon/cuda/kernels/optim.h>

#include <climits>

#include <echelon/base/error.h>
#include <echelon/cuda/launch.h>

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

// Element i of one parameter, in double as the CPU twin computes it.
__device__ __forceinline__ void update(const SGDOptions& a, bool first_step, double rate, int64_t i,
                                       float* param, const float* grad, float* momentum_buf,
                                       float* ema) {
  double g = static_cast<double>(grad[i]) + a.weight_decay * static_cast<double>(param[i]);
  if (a.momentum != 0.0) {
    const double buf =
        first_step ? g
                   : a.momentum * static_cast<double>(momentum_buf[i]) + (1.0 - a.dampening) * g;
    momentum_buf[i] = static_cast<float>(buf);
    g = a.nesterov ? g + a.momentum * buf : buf;
  }
  param[i] = static_cast<float>(static_cast<double>(param[i]) - rate * g);
  if (ema)
    ema[i] = static_cast<float>(a.ema_decay * static_cast<double>(ema[i]) +
                                (1.0 - a.ema_decay) * static_cast<double>(param[i]));
}

__global__ void sgd_step_kernel(int64_t count, SGDOptions a, bool first_step, float* param,
                                const float* grad, float* momentum_buf, const float* guard,
                                const double* lr, float* ema) {
  if (guard && !isfinite(*guard)) return;
  const double rate = lr ? *lr : a.lr;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    update(a, first_step, rate, i, param, grad, momentum_buf, ema);
}

// Up to kListMax parameters by value in the kernel's arguments (2.2 KiB, under the 4 KiB every
// CUDA version takes), so a captured CUDA graph replays the list without a copy. Block b updates
// elements [(b - first_block[t]) * kListChunk, ...) of parameter t, the t with
// first_block[t] <= b < first_block[t + 1].
constexpr int kListMax = 48;
constexpr int64_t kListChunk = 8 * kBlock;
struct SgdList {
  int tensors = 0;
  float* param[kListMax];
  const float* grad[kListMax];
  float* momentum_buf[kListMax];
  float* ema[kListMax];
  int64_t count[kListMax];
  int first_block[kListMax + 1];
};

__global__ void __launch_bounds__(kBlock)
    sgd_steps_kernel(SgdList list, SGDOptions a, bool first_step, const float* guard,
                     const double* lr) {
  if (guard && !isfinite(*guard)) return;
  const double rate = lr ? *lr : a.lr;
  const int b = static_cast<int>(blockIdx.x);
  int t = 0;
  while (list.first_block[t + 1] <= b) ++t;
  const int64_t begin = (b - list.first_block[t]) * kListChunk;
  const int64_t end = min(begin + kListChunk, list.count[t]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    update(a, first_step, rate, i, list.param[t], list.grad[t], list.momentum_buf[t], list.ema[t]);
}

}  // namespace

// ---- launchers
// ------------------------------------------------------------------------------------

void sgd_step(int64_t count, const SGDOptions& o, bool first_step, float* param, const float* grad,
              float* momentum_buf, cudaStream_t stream, const float* guard, const double* lr,
              float* ema) {
  launch_1d("sgd_step", count, stream, sgd_step_kernel, count, o, first_step, param, grad,
            momentum_buf, guard, lr, ema);
}

void sgd_steps(const std::vector<SgdTensor>& tensors, const SGDOptions& o, bool first_step,
               cudaStream_t stream, const float* guard, const double* lr) {
  for (size_t start = 0; start < tensors.size(); start += kListMax) {
    SgdList list;
    int blocks = 0;
    for (size_t k = start; k < tensors.size() && list.tensors < kListMax; ++k) {
      const SgdTensor& t = tensors[k];
      if (t.count <= 0) continue;
      const int64_t more = (t.count + kListChunk - 1) / kListChunk;
      ECH_CHECK(blocks + more <= INT_MAX, "sgd_steps: ", t.count, " elements: too many blocks");
      const int i = list.tensors++;
      list.param[i] = t.param, list.grad[i] = t.grad, list.momentum_buf[i] = t.momentum_buf;
      list.ema[i] = t.ema, list.count[i] = t.count, list.first_block[i] = blocks;
      blocks += static_cast<int>(more);
    }
    if (list.tensors == 0) continue;
    list.first_block[list.tensors] = blocks;
    ECH_LAUNCH(static_cast<unsigned>(blocks), kBlock, 0, stream, sgd_steps_kernel)
    (list, o, first_step, guard, lr);
    ECH_CUDA_CHECK_LAUNCH("sgd_steps");
  }
}

}  // namespace echelon::cuda
