// Module: the base of every layer and model (PyTorch's nn.Module, trimmed). A module owns named
// parameters (trainable, requires_grad) and buffers (running statistics), and named children;
// names compose with dots as in PyTorch: "0.weight", "3.conv1.weight", "1.running_mean".
//
// Parameters are Tensor handles shared with the layer's fields, the autograd graph and the
// optimizer. to(device) and load_state_dict() therefore update tensors IN PLACE (same handle),
// so an optimizer built before either still sees the model's parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <echelon/layers/state_dict.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/tensor.h>

namespace echelon {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Moves `t` to `device` keeping its TensorImpl (and so every handle on it): the impl is pointed at
// the copied storage.
void move_in_place(Tensor& t, Device device);

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // The type name, used in error messages: "Conv2d", "BasicBlock".
  virtual std::string name() const = 0;
  // One line with the configuration: "Conv2d(3, 16, kernel_size=3, stride=1, padding=1)".
  virtual std::string describe() const { return name(); }

  // Recursive, in registration order; names prefixed with `prefix` + "." when prefix is given.
  NamedTensors named_parameters(const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers(const std::string& prefix = "") const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  std::vector<std::shared_ptr<Module>> children() const;
  int64_t num_parameters() const;  // number of trainable scalars

  // Training mode (recursive): BatchNorm uses batch statistics, Dropout drops.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and buffers to `device` in place (handles stay valid); drops gradients.
  void to(Device device);
  void zero_grad();  // drops every parameter's gradient

  // Parameters then buffers of each module, depth-first in registration order.
  StateDict state_dict() const;
  // Copies values in place (casting dtype, across devices). strict: every key must match, both
  // ways. A shape mismatch always throws, naming the key and both shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

 protected:
  // Registers a parameter (sets requires_grad) / buffer / child and returns its handle.
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  void collect(const std::string& prefix, bool parameters, NamedTensors& out) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

}  // namespace echelon
