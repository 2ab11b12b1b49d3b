// Optimizer kernels. Why: an update is elementwise over a parameter, so one grid-stride pass
// reads param, grad and the momentum buffer once and writes them back (PyTorch SGD semantics).
#include <echelon/cuda/kernels/optim.h>

#include <echelon/cuda/launch.h>

namespace echelon::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------------

__global__ void sgd_step_kernel(int64_t count, SGDOptions a, bool first_step, float* param,
                                const float* grad, float* momentum_buf, const float* guard,
                                const double* lr, float* ema) {
  if (guard && !isfinite(*guard)) return;
  const double rate = lr ? *lr : a.lr;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
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

}  // namespace echelon::cuda
