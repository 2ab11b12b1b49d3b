// SGD with momentum, dampening, weight decay and Nesterov (PyTorch semantics; the options are
// SGDOptions in kernels/sgd.h, passed unchanged down to ops::sgd_step_ and the kernels), plus the
// learning-rate schedules in layers/lr_schedule.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <echelon/kernels/sgd.h>
#include <echelon/layers/lr_schedule.h>
#include <echelon/layers/module.h>
#include <echelon/layers/state_dict.h>
#include <echelon/tensor/tensor.h>

namespace echelon {

class SGD {
 public:
  // Named parameters (module.named_parameters()): names key the momentum buffers.
  SGD(NamedTensors params, SGDOptions options);
  // Unnamed parameters are named "0", "1", ... in order.
  SGD(const std::vector<Tensor>& params, SGDOptions options);

  // Updates every parameter that has a gradient, in place (parameters keep their handles).
  void step();
  // A float32 scalar on the parameters' device (undefined: none): while it is not finite, step()
  // leaves parameters and momentum buffers as they are, decided on the device without a read back
  // (parallel/deferred_stats.h). steps() still counts such a step.
  void set_guard(Tensor guard) { guard_ = std::move(guard); }
  void zero_grad();  // drops the parameters' gradients
  void set_lr(double lr);
  double lr() const { return options_.lr; }
  const SGDOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }  // completed step() calls
  const NamedTensors& params() const { return params_; }
  // Momentum buffers, parallel to params(); undefined before a parameter's first update (and
  // always with momentum 0). Read-only use: weight prediction in parallel/stage.cpp.
  const std::vector<Tensor>& momentum_buffers() const { return buffers_; }

  // Momentum buffers as "momentum_buffer.<param name>" (only those already created) and
  // "step" (int64 scalar); load_state_dict restores them, checking names and shapes.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  NamedTensors params_;
  std::vector<Tensor> buffers_;  // parallel to params_; undefined until the first update
  SGDOptions options_;
  Tensor guard_;
  int64_t steps_ = 0;
};

}  // namespace echelon
