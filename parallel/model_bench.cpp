#include <echelon/parallel/model_bench.h>

#include <algorithm>

#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel {

namespace {

// Fills result's layers and totals: the layers of model (or its --split-blocks view) as
// --balance auto profiles and weighs them.
void per_layer(Sequential& model, bool split_blocks, const Tensor& sample, int warmup, int repeats,
               ModelBenchResult& result) {
  const std::shared_ptr<Sequential> view = split_blocks ? model.with_split_blocks() : nullptr;
  const BalanceProfile profile =
      profile_for_balance(model, view ? *view : model, split_blocks, sample, repeats, warmup);
  const Sequential& layers = view ? *view : model;
  result.split_blocks = split_blocks;
  result.layers_total_s = result.pieces_total_s = 0;
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    result.layers_total_s += profile.cost[i];
    result.pieces_total_s += profile.layers[i].cost();
  }
  for (size_t i = 0; i < profile.layers.size(); ++i)
    result.layers.push_back(
        {static_cast<int64_t>(i), layers.at(i)->describe(), profile.layers[i], profile.cost[i],
         result.layers_total_s > 0 ? profile.cost[i] / result.layers_total_s : 0});
}

}  // namespace

void ModelInput::validate() const {
  ECH_CHECK(batch_size >= 1, "bench: batch_size must be >= 1 (got ", batch_size, ")");
  ECH_CHECK(channels >= 0, "bench: channels must be >= 0 (got ", channels, ")");
  ECH_CHECK(image_size >= 0, "bench: image_size must be >= 0 (got ", image_size, ")");
  ECH_CHECK(classes >= 2, "bench: classes must be >= 2 (got ", classes, ")");
}

SGDOptions bench_sgd_options() {
  SGDOptions sgd;
  sgd.lr = 0.01;
  sgd.momentum = 0.9;
  return sgd;
}

std::shared_ptr<Sequential> ModelInput::make_model() const {
  const Shape shape = image_shape();
  return echelon::make_model(model, shape[1], classes, seed, shape[2]);
}

std::vector<data::Batch> ModelInput::make_batches(Device device, int count) const {
  Generator gen(seed + 1);
  std::vector<int64_t> labels(static_cast<size_t>(batch_size));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i) % classes;
  const Tensor label_tensor = Tensor::from_vector(labels, {batch_size}).to(device);
  std::vector<data::Batch> batches;
  batches.reserve(static_cast<size_t>(std::max(count, 0)));
  for (int i = 0; i < count; ++i)
    batches.push_back(
        {ops::randn(image_shape(), gen, kFloat32, device), label_tensor, batch_size, i});
  return batches;
}

Shape ModelInput::image_shape() const {
  const int64_t c = channels > 0 ? channels : (model == "lenet5" ? 1 : 3);
  const int64_t size = image_size > 0 ? image_size : (c == 1 ? 28 : 32);
  return {batch_size, c, size, size};
}

ModelBenchResult run_model_bench(const ModelBenchOptions& o) {
  o.input.validate();
  ECH_CHECK(o.warmup >= 0 && o.repeats >= 1, "bench model: repeats must be >= 1 and warmup >= 0");
  ModelBenchResult result;
  result.input = o.input;
  result.device = o.device;
  result.threads =
      o.device.is_cpu() ? std::max(1, ops::cpu_threads()) : 0;  // unset: the pool has 1
  std::shared_ptr<Sequential> model = o.input.make_model();
  model->to(o.device);
  const std::vector<data::Batch> batches = o.input.make_batches(o.device, 1);
  if (o.per_layer)
    per_layer(*model, o.split_blocks, batches[0].images, o.warmup, o.repeats, result);
  std::unique_ptr<StepEngine> engine =
      make_single_device_engine(model, bench_sgd_options(), o.device);
  result.step = time_repeated([&] { engine->train_step(batches[0]); }, o.device,
                              std::max(o.warmup, 1), o.repeats);
  result.images_per_s =
      result.step.median_s > 0 ? static_cast<double>(o.input.batch_size) / result.step.median_s : 0;
  return result;
}

}  // namespace echelon::parallel
