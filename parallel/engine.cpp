#include <echelon/parallel/engine.h>

#include <utility>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/parallel/pipeline.h>

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

StepStats StepEngine::follow_epoch() {
  ECH_FAIL("engine ", name(), " takes every mini-batch itself: it has no epoch to follow");
}

std::unique_ptr<StepEngine> make_single_device_engine(std::shared_ptr<Sequential> model,
                                                      const SGDOptions& sgd, Device device) {
  ECH_CHECK(model != nullptr, "make_single_device_engine: model is null");
  return std::make_unique<PipelineEngine>(std::move(model), sgd, device, PipelineOptions::single());
}

}  // namespace echelon::parallel
