#include <echelon/layers/batch_norm.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>

namespace echelon {

BatchNorm::BatchNorm(int64_t num_features, int64_t expected_rank, double momentum, double eps)
    : num_features_(num_features), expected_rank_(expected_rank), momentum_(momentum), eps_(eps) {
  ECH_CHECK(num_features > 0 && momentum >= 0 && momentum <= 1 && eps > 0,
            "BatchNorm: invalid num_features=", num_features, " momentum=", momentum, " eps=", eps);
  weight = register_parameter("weight", Tensor::ones({num_features}));
  bias = register_parameter("bias", Tensor::zeros({num_features}));
  running_mean = register_buffer("running_mean", Tensor::zeros({num_features}));
  running_var = register_buffer("running_var", Tensor::ones({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, kInt64));
}

void BatchNorm::begin_forward(const Tensor& x) {
  ECH_CHECK(x.dim() == expected_rank_ && x.size(1) == num_features_, describe(),
            ": expected input with ", expected_rank_, " dims and ", num_features_,
            " channels, got ", x.shape());
  if (is_training()) {
    ECH_CHECK(x.numel() / num_features_ > 1, describe(),
              ": training needs more than one value per channel, got input ", x.shape());
    // The counter lives on the host, also when the module was moved to a GPU (moved back here,
    // once): incremented on the device it would cost two host synchronisations per layer and
    // training step (the sync-free step, parallel/deferred_stats.h). Exact across devices.
    move_in_place(num_batches_tracked, Device::cpu());
    num_batches_tracked.data<int64_t>()[0] += 1;
  }
}

Tensor BatchNorm::forward(const Tensor& x) {
  begin_forward(x);
  return batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum_, eps_);
}

Tensor BatchNorm::forward_relu(const Tensor& x) {
  begin_forward(x);
  return batch_norm_relu(x, weight, bias, running_mean, running_var, is_training(), momentum_,
                         eps_);
}

Tensor BatchNorm::forward_add_relu(const Tensor& x, const Tensor& residual) {
  begin_forward(x);
  return batch_norm_add_relu(x, residual, weight, bias, running_mean, running_var, is_training(),
                             momentum_, eps_);
}

std::string BatchNorm::describe() const {
  return str(name(), "(", num_features_, ", eps=", eps_, ", momentum=", momentum_, ")");
}

}  // namespace echelon
