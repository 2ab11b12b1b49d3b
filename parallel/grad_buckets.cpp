#include <echelon/parallel/grad_buckets.h>

#include <algorithm>
#include <chrono>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel {

GradientBuckets::GradientBuckets(std::shared_ptr<ProcessGroup> replicas, std::vector<Tensor> params,
                                 size_t cap_bytes)
    : replicas_(std::move(replicas)), params_(std::move(params)) {
  ECH_CHECK(replicas_ != nullptr, "gradient buckets need the partition's replica group");
  const bool on_cpu = std::all_of(params_.begin(), params_.end(),
                                  [](const Tensor& p) { return p.device().is_cpu(); });
  // Last layer first: the order in which the backward finishes the gradients.
  size_t bytes = 0;
  for (size_t i = params_.size(); i-- > 0;) {
    const Tensor& param = params_[i];
    const bool full = cap_bytes > 0 && bytes >= cap_bytes;
    const bool other_dtype =
        !buckets_.empty() && params_[buckets_.back().params.front()].dtype() != param.dtype();
    if (buckets_.empty() || full || other_dtype) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(i);
    bytes += param.nbytes();
    bucket_of_[&param.impl()] = buckets_.size() - 1;
  }
  overlaps_ = on_cpu && cap_bytes > 0;
  grouped_ = !on_cpu;
  if (grouped_) buckets_.clear();  // GPU: one grouped all-reduce at the update (nccl_comm.h)
  for (Bucket& bucket : buckets_) bucket.waiting = bucket.params.size();
}

void GradientBuckets::gradient_ready(const TensorImpl& leaf) {
  const auto found = bucket_of_.find(&leaf);
  if (found == bucket_of_.end() || grouped_) return;  // the stage's input, say
  Bucket& bucket = buckets_[found->second];
  if (bucket.waiting > 0) --bucket.waiting;
  start_ready_buckets();
}

void GradientBuckets::start_ready_buckets() {
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) start(buckets_[next_++], true);
}

void GradientBuckets::start(Bucket& bucket, bool early) {
  NoGradGuard no_grad;
  int64_t numel = 0;
  for (size_t i : bucket.params) numel += params_[i].numel();
  const DType dtype = params_[bucket.params.front()].dtype();
  // Zeros stand in for a gradient this replica lacks, so every replica sums the same layout.
  bucket.flat = Tensor::zeros({numel}, dtype, Device::cpu());
  int64_t offset = 0;
  for (size_t i : bucket.params) {
    const Tensor& param = params_[i];
    if (Tensor grad = param.grad(); grad.defined()) {
      Tensor slot = bucket.flat.narrow(0, offset, param.numel()).view(param.shape());
      ops::copy_(slot, grad);
    }
    offset += param.numel();
  }
  bucket.sum = replicas_->start_all_reduce_sum(bucket.flat);
  ++stats_.buckets;
  stats_.overlapped += early ? 1 : 0;
  stats_.bytes += static_cast<int64_t>(bucket.flat.nbytes());
}

void GradientBuckets::finish() {
  const auto begin = std::chrono::steady_clock::now();
  if (grouped_) {  // GPU gradients: the grouped all-reduce (NCCL) on the partition's stream
    std::vector<Tensor> grads;
    for (const Tensor& param : params_) {
      if (Tensor grad = param.grad(); grad.defined()) grads.push_back(grad);
    }
    replicas_->all_reduce_sum(grads);  // the loss weights already hold each replica's share
    ++stats_.buckets;
    for (const Tensor& grad : grads) stats_.bytes += static_cast<int64_t>(grad.nbytes());
  }
  while (next_ < buckets_.size()) start(buckets_[next_++], false);
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    bucket.sum->wait();
    bucket.sum.reset();
    int64_t offset = 0;
    for (size_t i : bucket.params) {
      const Tensor& param = params_[i];
      if (Tensor grad = param.grad(); grad.defined()) {
        ops::copy_(grad, bucket.flat.narrow(0, offset, param.numel()).view(param.shape()));
      }
      offset += param.numel();
    }
    bucket.flat = Tensor();
    bucket.waiting = bucket.params.size();  // armed for the next update
  }
  next_ = 0;
  stats_.wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

}  // namespace echelon::parallel
