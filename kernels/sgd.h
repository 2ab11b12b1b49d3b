// SGD hyper-parameters: ONE struct from the trainer down to the kernels (the engines, the SGD
// optimizer in layers/optim, ops::sgd_step_, the CPU twin in tensor/cpu/optim and the CUDA kernel
// in cuda/kernels/optim).
#pragma once

namespace echelon {

// PyTorch semantics: g = grad + weight_decay * param; buf = momentum * buf + (1 - dampening) * g
// (buf = g on a parameter's first step); g = nesterov ? g + momentum * buf : buf;
// param -= lr * g. The trainer's LR schedule changes lr between steps.
// ema_decay d > 0 also keeps an exponential moving average of each parameter, updated in the same
// pass after the parameter: ema = d * ema + (1 - d) * param (`--ema`; the trainer evaluates the
// averaged weights). 0: no average.
struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;   // requires momentum > 0 and dampening == 0 (as PyTorch)
  double ema_decay = 0.0;  // 0, or in (0, 1)
};

}  // namespace echelon
