#include <echelon/parallel/grad_buckets.h>

#include <algorithm>
#include <chrono>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/allocator.h>
#endif

namespace echelon::parallel {

GradientBuckets::GradientBuckets(std::shared_ptr<ProcessGroup> replicas, std::vector<Tensor> params,
                                 size_t cap_bytes)
    : replicas_(std::move(replicas)), params_(std::move(params)) {
  ECH_CHECK(replicas_ != nullptr, "gradient buckets need the partition's replica group");
  ECH_CHECK(std::all_of(params_.begin(), params_.end(),
                        [&](const Tensor& p) { return p.device() == params_.front().device(); }),
            "gradient buckets: a partition's parameters must all be on one device");
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
  overlaps_ = cap_bytes > 0;
  for (Bucket& bucket : buckets_) bucket.waiting = bucket.params.size();
}

void GradientBuckets::gradient_ready(const TensorImpl& leaf) {
  const auto found = bucket_of_.find(&leaf);
  if (found == bucket_of_.end()) return;  // the stage's input, say
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
  const Tensor& first = params_[bucket.params.front()];
  // Zeros stand in for a gradient this replica lacks, so every replica sums the same layout.
  bucket.flat = Tensor::zeros({numel}, first.dtype(), first.device());
  int64_t offset = 0;
  for (size_t i : bucket.params) {
    const Tensor& param = params_[i];
    if (Tensor grad = param.grad(); grad.defined()) {
      Tensor slot = bucket.flat.narrow(0, offset, param.numel()).view(param.shape());
      ops::copy_(slot, grad);
    }
    offset += param.numel();
  }
#if ECHELON_WITH_CUDA
  if (bucket.flat.is_cuda()) {
    start_on_device(bucket);
  } else {
    bucket.sum = replicas_->start_all_reduce_sum(bucket.flat);
  }
#else
  bucket.sum = replicas_->start_all_reduce_sum(bucket.flat);
#endif
  ++stats_.buckets;
  stats_.overlapped += early ? 1 : 0;
  stats_.bytes += static_cast<int64_t>(bucket.flat.nbytes());
}

#if ECHELON_WITH_CUDA
void GradientBuckets::start_on_device(Bucket& bucket) {
  const int device = bucket.flat.device().index;
  if (!comm_stream_) comm_stream_ = std::make_unique<cuda::Stream>(device);
  cuda::Event filled;  // the flat buffer's copies, queued on the compute stream
  filled.record(cuda::current_stream(device));
  filled.wait(comm_stream_->get());
  {
    cuda::StreamGuard guard(*comm_stream_);
    std::vector<Tensor> flat{bucket.flat};
    replicas_->all_reduce_sum(flat);  // NCCL, enqueued on comm_stream_
  }
  cuda::record_stream(device, bucket.flat.storage()->data(), comm_stream_->get());
  bucket.summed.emplace();
  bucket.summed->record(comm_stream_->get());
}
#endif

void GradientBuckets::finish() {
  const auto begin = std::chrono::steady_clock::now();
  while (next_ < buckets_.size()) start(buckets_[next_++], false);
  NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.sum) {
      bucket.sum->wait();
      bucket.sum.reset();
    }
#if ECHELON_WITH_CUDA
    if (bucket.summed) {  // the update's stream waits for the sum; the host does not
      bucket.summed->wait(cuda::current_stream(bucket.flat.device().index));
      bucket.summed.reset();
    }
#endif
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
