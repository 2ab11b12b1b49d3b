#include <echelon/parallel/engine.h>

#include <cmath>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/optim.h>

namespace echelon::parallel {

void StepStats::add(const StepStats& other) {
  batches += other.batches;
  samples += other.samples;
  loss_sum += other.loss_sum;
  correct += other.correct;
  if (!other.finite && finite) {
    finite = false;
    nonfinite_batch = other.nonfinite_batch;
  }
}

Tensor StepEngine::predict(const Tensor& images) {
  Sequential& net = model();
  const bool was_training = net.is_training();
  net.eval();
  NoGradGuard no_grad;
  Tensor logits;
  try {
    logits = net.forward(images);
  } catch (...) {
    net.train(was_training);
    throw;
  }
  net.train(was_training);
  return logits;
}

namespace {

class SingleDeviceEngine : public StepEngine {
 public:
  SingleDeviceEngine(std::shared_ptr<Sequential> model, const SGDOptions& sgd, Device device)
      : model_(std::move(model)), device_(device), optimizer_(model_->named_parameters(), sgd) {
    model_->to(device_);
    model_->train();
  }

  std::string name() const override { return "single"; }

  StepStats train_step(const data::Batch& batch) override {
    ECH_CHECK(batch.images.defined() && batch.images.dim() == 4,
              "train_step: images must be (B, C, H, W), got ",
              batch.images.defined() ? batch.images.describe() : std::string("undefined"));
    ECH_CHECK(batch.labels.defined() && batch.labels.dim() == 1 &&
                  batch.labels.size(0) == batch.images.size(0),
              "train_step: labels must be (B) matching images ", batch.images.shape());
    const Tensor images =
        batch.images.device() == device_ ? batch.images : batch.images.to(device_);
    const Tensor labels =
        batch.labels.device() == device_ ? batch.labels : batch.labels.to(device_);

    optimizer_.zero_grad();
    const Tensor logits = model_->forward(images);  // (B, classes)
    const Tensor loss = cross_entropy(logits, labels);
    const double loss_value = loss.item<float>();

    StepStats stats;
    stats.batches = 1;
    stats.samples = images.size(0);
    stats.loss_sum = loss_value * static_cast<double>(stats.samples);
    if (!std::isfinite(loss_value)) {
      // Leave the weights as they were so the trainer can diagnose this batch.
      stats.finite = false;
      stats.nonfinite_batch = batch.index;
      return stats;
    }
    stats.correct = correct_count(logits.detach(), labels);
    backward(loss);
    optimizer_.step();
    return stats;
  }

  void set_lr(double lr) override { optimizer_.set_lr(lr); }
  Sequential& model() override { return *model_; }
  StateDict optimizer_state() const override { return optimizer_.state_dict(); }
  void load_optimizer_state(const StateDict& state) override { optimizer_.load_state_dict(state); }

 private:
  std::shared_ptr<Sequential> model_;
  Device device_;
  SGD optimizer_;
};

}  // namespace

std::unique_ptr<StepEngine> make_single_device_engine(std::shared_ptr<Sequential> model,
                                                      const SGDOptions& sgd, Device device) {
  ECH_CHECK(model != nullptr, "make_single_device_engine: model is null");
  return std::make_unique<SingleDeviceEngine>(std::move(model), sgd, device);
}

}  // namespace echelon::parallel
