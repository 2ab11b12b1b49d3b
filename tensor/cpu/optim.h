// Optimizer CPU twins (naive). cuda/kernels/optim.h declares the same names for float on a stream.
#pragma once

#include <cstdint>

#include <echelon/kernels/sgd.h>

namespace echelon::cpu {

// In place over `count` elements: param -= lr * direction; momentum_buf (same size) is read and
// written when momentum != 0 and may be null otherwise. first_step: the buffer starts as the
// gradient (a parameter's first update). guard (a scalar, may be null): while *guard is not
// finite, nothing is updated (the sync-free training step, parallel/deferred_stats.h). lr (a
// scalar, may be null): the learning rate, read where the update runs instead of o.lr (a CUDA
// graph replays the step with the rate of the moment, parallel/cuda_graph.h). ema (count, may be
// null; needs o.ema_decay > 0): the parameter's moving average, updated from the new parameter.
template <typename T>
void sgd_step(int64_t count, const SGDOptions& o, bool first_step, T* param, const T* grad,
              T* momentum_buf, const float* guard = nullptr, const double* lr = nullptr,
              T* ema = nullptr);

}  // namespace echelon::cpu
