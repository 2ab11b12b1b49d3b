// SGD arguments shared by the CPU twin (tensor/cpu/optim) and the CUDA kernel (cuda/kernels/optim).
#pragma once

namespace echelon {

// SGD hyper-parameters, PyTorch semantics (see ops::sgd_step_).
struct SgdArgs {
  double lr = 0.01, momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer starts as the gradient
};

}  // namespace echelon
