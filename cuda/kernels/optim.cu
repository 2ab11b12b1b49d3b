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

// Up to kCapacity parameters by value in the kernel's arguments, so that a captured CUDA graph
// replays the list without a copy: 48 (2.2 KiB, under the 4 KiB every CUDA version takes) for
// the small nets (LeNet-5: 10), 384 (17 KiB: CUDA 12.1+ on Volta and newer take 32 KiB) so that
// ResNet-110's 329 go in one launch (they were 7 of 48). Block b updates elements
// [(b - first_block[t]) * kListChunk, ...) of parameter t, the t with
// first_block[t] <= b < first_block[t + 1] (strictly increasing: no empty parameter is listed).
constexpr int kSmallList = 48, kLargeList = 384;
constexpr int64_t kListChunk = 8 * kBlock;
template <int kCapacity>
struct SgdList {
  int tensors = 0;
  float* param[kCapacity];
  const float* grad[kCapacity];
  float* momentum_buf[kCapacity];
  float* ema[kCapacity];
  int64_t count[kCapacity];
  int first_block[kCapacity + 1];
};

template <int kCapacity>
__global__ void __launch_bounds__(kBlock)
    sgd_steps_kernel(SgdList<kCapacity> list, SGDOptions a, bool first_step, const float* guard,
                     const double* lr) {
  if (guard && !isfinite(*guard)) return;
  const double rate = lr ? *lr : a.lr;
  const int b = static_cast<int>(blockIdx.x);
  int t = 0, last = list.tensors - 1;  // binary search: t is in [t, last]
  while (t < last) {
    const int mid = (t + last + 1) / 2;
    if (list.first_block[mid] <= b)
      t = mid;
    else
      last = mid - 1;
  }
  const int64_t begin = (b - list.first_block[t]) * kListChunk;
  const int64_t end = min(begin + kListChunk, list.count[t]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
    update(a, first_step, rate, i, list.param[t], list.grad[t], list.momentum_buf[t], list.ema[t]);
}

// Launches sgd_steps_kernel on the nonempty tensors of [*next, tensors.size()), at most
// kCapacity of them; *next moves past the tensors taken.
template <int kCapacity>
void launch_list(const std::vector<SgdTensor>& tensors, size_t* next, const SGDOptions& o,
                 bool first_step, cudaStream_t stream, const float* guard, const double* lr) {
  SgdList<kCapacity> list;
  int blocks = 0;
  size_t k = *next;
  for (; k < tensors.size() && list.tensors < kCapacity; ++k) {
    const SgdTensor& t = tensors[k];
    if (t.count <= 0) continue;
    const int64_t more = (t.count + kListChunk - 1) / kListChunk;
    ECH_CHECK(blocks + more <= INT_MAX, "sgd_steps: ", t.count, " elements: too many blocks");
    const int i = list.tensors++;
    list.param[i] = t.param, list.grad[i] = t.grad, list.momentum_buf[i] = t.momentum_buf;
    list.ema[i] = t.ema, list.count[i] = t.count, list.first_block[i] = blocks;
    blocks += static_cast<int>(more);
  }
  *next = k;
  if (list.tensors == 0) return;
  list.first_block[list.tensors] = blocks;
  ECH_LAUNCH(static_cast<unsigned>(blocks), kBlock, 0, stream, sgd_steps_kernel<kCapacity>)
  (list, o, first_step, guard, lr);
  ECH_CUDA_CHECK_LAUNCH("sgd_steps");
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
  size_t nonempty = 0;
  for (const SgdTensor& t : tensors) nonempty += t.count > 0 ? 1 : 0;
  // The small list's arguments where they hold every tensor: fewer bytes to each launch.
  for (size_t next = 0; next < tensors.size();)
    if (nonempty <= kSmallList)
      launch_list<kSmallList>(tensors, &next, o, first_step, stream, guard, lr);
    else
      launch_list<kLargeList>(tensors, &next, o, first_step, stream, guard, lr);
}

}  // namespace echelon::cuda
