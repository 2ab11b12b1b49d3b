// SGD with momentum, dampening, weight decay and Nesterov (PyTorch semantics; the options are
// SGDOptions in kernels/sgd.h, passed unchanged down to ops::sgd_step_ and the kernels), plus the
// learning-rate schedules in layers/lr_schedule.h. With SGDOptions::ema_decay > 0 it also keeps
// an exponential moving average of every parameter (Polyak averaging), updated by the same kernel
// pass as the parameter; the trainer evaluates those averaged weights (`--ema`).
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
  // From now on the rate also lives in a float64 scalar on `device`, which step() passes to the
  // update (not the value as a kernel argument) and set_lr rewrites on the current stream when it
  // changes: a captured CUDA graph of the step then updates with the rate of the moment.
  void keep_lr_on_device(Device device);
  double lr() const { return options_.lr; }
  const SGDOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }  // completed step() calls
  // A replay of a captured step() (parallel/cuda_graph.h) ran: counted as a step.
  void count_replayed_step() { ++steps_; }
  const NamedTensors& params() const { return params_; }
  // Momentum buffers, parallel to params(); undefined before a parameter's first update (and
  // always with momentum 0). Read-only use: weight prediction in parallel/stage.cpp.
  const std::vector<Tensor>& momentum_buffers() const { return buffers_; }
  // Moving averages (ema_decay > 0), parallel to params(); undefined before a parameter's first
  // update, where its average starts as the parameter's value before that update.
  const std::vector<Tensor>& averages() const { return averages_; }

  // Momentum buffers as "momentum_buffer.<param name>", averages as "ema.<param name>" (only
  // those already created) and "step" (int64 scalar); load_state_dict restores them, checking
  // names and shapes.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // The per-parameter key prefixes of state_dict(), for engines that route a merged state to the
  // optimizers owning each parameter.
  static const std::vector<std::string>& parameter_state_prefixes();
  static constexpr const char* kAveragePrefix = "ema.";

 private:
  NamedTensors params_;
  std::vector<Tensor> buffers_;   // parallel to params_; undefined until the first update
  std::vector<Tensor> averages_;  // likewise; only with ema_decay > 0
  SGDOptions options_;
  Tensor guard_;
  Tensor device_lr_;  // float64 scalar; undefined unless keep_lr_on_device
  int64_t steps_ = 0;
};

// Copies each parameter's moving average (its "ema.<name>" entry of an SGD state) into it, for
// good (`echelon eval` of a --ema checkpoint); returns how many parameters had one. Every shape is
// checked first: on an error no parameter has changed.
int64_t load_averages(Module& model, const StateDict& optimizer_state);

// The moving averages (SGD "ema.<name>" entries of an optimizer state) in place of the model's
// parameters while it lives: evaluation of a --ema run. The parameters keep their tensors (a
// captured CUDA graph names them); their values are copied aside and restored by the destructor,
// also when the evaluation throws. Parameters without an average keep their values (buffers
// such as batch-norm running statistics are the live model's).
class AveragedWeights {
 public:
  AveragedWeights(Module& model, const StateDict& optimizer_state);
  ~AveragedWeights();
  AveragedWeights(const AveragedWeights&) = delete;
  AveragedWeights& operator=(const AveragedWeights&) = delete;

 private:
  std::vector<Tensor> params_, saved_;  // the replaced parameters, and their own values
};

}  // namespace echelon
