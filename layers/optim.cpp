#include <echelon/layers/optim.h>

#include <cmath>
#include <cstring>
#include <vector>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon {

namespace {
void check_options(const SGDOptions& o) {
  ECH_CHECK(std::isfinite(o.lr) && o.lr >= 0, "SGD: lr must be >= 0, got ", o.lr);
  ECH_CHECK(o.momentum >= 0, "SGD: momentum must be >= 0, got ", o.momentum);
  ECH_CHECK(o.weight_decay >= 0, "SGD: weight_decay must be >= 0, got ", o.weight_decay);
  ECH_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "SGD: nesterov needs momentum > 0 and dampening 0, got momentum ", o.momentum,
            " dampening ", o.dampening);
  ECH_CHECK(o.ema_decay == 0 || (o.ema_decay > 0 && o.ema_decay < 1),
            "SGD: ema_decay must be 0 (no average) or in (0, 1), got ", o.ema_decay);
}

NamedTensors number(const std::vector<Tensor>& params) {
  NamedTensors named;
  for (size_t i = 0; i < params.size(); ++i) named.emplace_back(std::to_string(i), params[i]);
  return named;
}

const std::string kBufferPrefix = "momentum_buffer.";
}  // namespace

const std::vector<std::string>& SGD::parameter_state_prefixes() {
  static const std::vector<std::string> prefixes = {kBufferPrefix, kAveragePrefix};
  return prefixes;
}

SGD::SGD(NamedTensors params, SGDOptions options)
    : params_(std::move(params)),
      buffers_(params_.size()),
      averages_(params_.size()),
      options_(options) {
  check_options(options_);
  for (const auto& [name, p] : params_) {
    ECH_CHECK(p.defined() && is_floating(p.dtype()), "SGD: parameter '", name,
              "' is not a floating-point tensor");
  }
}

SGD::SGD(const std::vector<Tensor>& params, SGDOptions options) : SGD(number(params), options) {}

void SGD::step() {
  NoGradGuard no_grad;
  // The parameters as two lists, by whether this is their first update (one that had no gradient
  // before starts its buffer later): on a GPU each list is one launch for up to 384 parameters
  // (ops::sgd_steps_).
  struct Lists {
    std::vector<Tensor> params, grads, buffers, averages;
  } lists[2];
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i].second;
    const Tensor grad = param.grad();
    if (!grad.defined()) continue;
    // Plain SGD (momentum 0) needs no buffer; sgd_steps_ then ignores the undefined one.
    const bool first = !buffers_[i].defined();
    if (first && options_.momentum > 0) {
      buffers_[i] = Tensor::empty(param.shape(), param.dtype(), param.device());
    }
    // The average starts at the weights before the first update (a captured step never creates
    // it: CUDA graphs capture after eager steps, parallel/cuda_graph.h).
    if (options_.ema_decay > 0 && !averages_[i].defined()) averages_[i] = param.clone();
    Lists& l = lists[first ? 1 : 0];
    l.params.push_back(param);
    l.grads.push_back(grad);
    l.buffers.push_back(buffers_[i]);
    l.averages.push_back(averages_[i]);
  }
  for (const int first : {0, 1})
    if (!lists[first].params.empty())
      ops::sgd_steps_(lists[first].params, lists[first].grads, lists[first].buffers, options_,
                      first == 1, guard_, device_lr_, lists[first].averages);
  ++steps_;
}

void SGD::zero_grad() {
  for (auto& [name, p] : params_) p.zero_grad();
}

void SGD::set_lr(double lr) {
  // 0 is valid: a linear warm-up starts there.
  ECH_CHECK(std::isfinite(lr) && lr >= 0, "SGD::set_lr: lr must be >= 0, got ", lr);
  // Only a change is written: inside a graph capture the rate is the one set just before it.
  if (device_lr_.defined() && lr != options_.lr) {
    // Through pinned memory: an asynchronous copy on the current stream, no host synchronisation.
    Tensor host = Tensor::empty({}, kFloat64, Device::cpu(), /*pinned=*/true);
    host.data<double>()[0] = lr;
    ops::copy_(device_lr_, host.to(device_lr_.device(), /*non_blocking=*/true));
  }
  options_.lr = lr;
}

void SGD::keep_lr_on_device(Device device) {
  device_lr_ = Tensor::scalar(options_.lr, kFloat64).to(device);  // float64 has no CUDA fill
}

StateDict SGD::state_dict() const {
  StateDict state;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (buffers_[i].defined()) state.insert(kBufferPrefix + params_[i].first, buffers_[i]);
    if (averages_[i].defined()) state.insert(kAveragePrefix + params_[i].first, averages_[i]);
  }
  state.insert("step", Tensor::scalar(static_cast<double>(steps_), kInt64));
  return state;
}

void SGD::load_state_dict(const StateDict& state) {
  for (const auto& [key, value] : state) {
    if (key == "step") continue;
    const bool average = key.rfind(kAveragePrefix, 0) == 0;
    ECH_CHECK(average || key.rfind(kBufferPrefix, 0) == 0, "SGD::load_state_dict: unexpected key '",
              key, "'");
    // An average without --ema would silently stop being updated (and evaluated).
    ECH_CHECK(!average || options_.ema_decay > 0, "SGD::load_state_dict: '", key,
              "' is a moving average, but this optimizer keeps none (ema_decay 0; pass --ema)");
    const std::string name =
        key.substr(average ? std::strlen(kAveragePrefix) : kBufferPrefix.size());
    size_t i = 0;
    while (i < params_.size() && params_[i].first != name) ++i;
    ECH_CHECK(i < params_.size(), "SGD::load_state_dict: '", key,
              "' names no parameter of this optimizer");
    const Tensor& param = params_[i].second;
    ECH_CHECK(value.shape() == param.shape(), "SGD::load_state_dict: '", key, "' has shape ",
              value.shape(), " but the parameter has shape ", param.shape());
    Tensor& slot = average ? averages_[i] : buffers_[i];
    slot = Tensor::empty(param.shape(), param.dtype(), param.device());
    ops::copy_(slot, value);
  }
  if (const Tensor* step = state.find("step")) steps_ = step->cpu().to(kInt64).item<int64_t>();
}

namespace {
// The parameters of `model` that have a moving average in `optimizer_state`, with it; every shape
// is checked before the caller changes anything.
std::vector<std::pair<Tensor, const Tensor*>> averaged_parameters(
    const Module& model, const StateDict& optimizer_state) {
  std::vector<std::pair<Tensor, const Tensor*>> pairs;
  for (const auto& [name, param] : model.named_parameters()) {
    const Tensor* average = optimizer_state.find(SGD::kAveragePrefix + name);
    if (average == nullptr) continue;
    ECH_CHECK(average->shape() == param.shape(), "moving average '", SGD::kAveragePrefix, name,
              "' has shape ", average->shape(), " but the parameter has shape ", param.shape());
    pairs.emplace_back(param, average);
  }
  return pairs;
}
}  // namespace

int64_t load_averages(Module& model, const StateDict& optimizer_state) {
  NoGradGuard no_grad;
  auto pairs = averaged_parameters(model, optimizer_state);
  for (auto& [param, average] : pairs) ops::copy_(param, *average);
  return static_cast<int64_t>(pairs.size());
}

AveragedWeights::AveragedWeights(Module& model, const StateDict& optimizer_state) {
  NoGradGuard no_grad;
  for (auto& [param, average] : averaged_parameters(model, optimizer_state)) {
    saved_.push_back(param.clone());
    ops::copy_(param, *average);
    params_.push_back(param);
  }
}

AveragedWeights::~AveragedWeights() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) ops::copy_(params_[i], saved_[i]);
}

}  // namespace echelon
