#include <echelon/layers/module.h>

#include <set>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

void move_in_place(Tensor& t, Device device) {
  if (!t.defined() || t.device() == device) return;
  Tensor moved = t.contiguous().to(device);
  TensorImpl& impl = t.impl();
  impl.storage = moved.storage();
  impl.strides = moved.strides();
  impl.offset = moved.offset();
  if (impl.autograd) impl.autograd->grad.reset();
}

void Module::collect(const std::string& prefix, bool parameters, NamedTensors& out) const {
  for (const auto& [name, tensor] : parameters ? parameters_ : buffers_) {
    out.emplace_back(join(prefix, name), tensor);
  }
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), parameters, out);
}

NamedTensors Module::named_parameters(const std::string& prefix) const {
  NamedTensors out;
  collect(prefix, true, out);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(tensor);
  return out;
}

NamedTensors Module::named_buffers(const std::string& prefix) const {
  NamedTensors out;
  collect(prefix, false, out);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t count = 0;
  for (const Tensor& p : parameters()) count += p.numel();
  return count;
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (auto& [name, t] : named_parameters()) move_in_place(t, device);
  for (auto& [name, t] : named_buffers()) move_in_place(t, device);
}

void Module::zero_grad() {
  for (Tensor p : parameters()) p.zero_grad();
}

StateDict Module::state_dict() const {
  StateDict state;
  // PyTorch order: per module, parameters then buffers, depth-first.
  for (const auto& [name, t] : parameters_) state.insert(name, t);
  for (const auto& [name, t] : buffers_) state.insert(name, t);
  for (const auto& [child_name, child] : children_) {
    for (const auto& [name, t] : child->state_dict()) state.insert(join(child_name, name), t);
  }
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  std::vector<std::string> missing;
  for (const auto& [key, target] : own) {
    const Tensor* source = state.find(key);
    if (!source) {
      missing.push_back(key);
      continue;
    }
    ECH_CHECK(source->shape() == target.shape(), name(), ".load_state_dict: '", key, "' has shape ",
              source->shape(), " in the state dict but ", target.shape(), " in the model");
    // No silent conversion: an I32 tensor where the model holds F32 is a different file. The one
    // exception widens exactly: bfloat16 weights (a BF16 checkpoint) into a float32/64 model.
    const bool widens = source->dtype() == kBFloat16 && is_floating(target.dtype());
    ECH_CHECK(source->dtype() == target.dtype() || widens, name(), ".load_state_dict: '", key,
              "' is ", dtype_name(source->dtype()), " in the state dict but ",
              dtype_name(target.dtype()), " in the model");
  }
  if (strict) {
    ECH_CHECK(missing.empty(), name(), ".load_state_dict: missing key '", missing.front(), "' (",
              missing.size(), " missing)");
    for (const auto& [key, value] : state) {
      ECH_CHECK(own.contains(key), name(), ".load_state_dict: unexpected key '", key, "'");
    }
  }
  NoGradGuard no_grad;
  for (const auto& [key, target] : own) {
    const Tensor* source = state.find(key);
    if (!source) continue;
    Tensor dst = target;
    ops::copy_(dst, *source);
  }
}

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  value.set_requires_grad(true);
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, value);
  return value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  ECH_CHECK(module != nullptr, this->name(), ": child '", name, "' is null");
  children_.emplace_back(name, std::move(module));
}

}  // namespace echelon
