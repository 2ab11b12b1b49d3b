// Data parallelism's gradient sum, in buckets that start while the backward still runs (as
// PyTorch DDP does). A partition's parameters are grouped, last layer first (the order in which
// the backward finishes them), into buckets of about `cap` bytes. During the backward that an
// update follows, autograd reports each parameter whose gradient is final (LeafReadyFn); once
// every parameter of the next bucket is final, its gradients are copied into one flat buffer and
// a non-blocking all-reduce over the partition's replicas starts. Right before the update,
// finish() starts what is left (a parameter the backward never reached, or every bucket when
// there was no overlap) and waits for all, so the update sees the same sums as one all-reduce
// after the backward: for two replicas a + b bit for bit, whatever the buckets.
//
// Buckets start strictly in order, so every replica issues the same collectives in the same
// order. GPU gradients: a bucket's flat buffer is filled on the partition's (compute) stream, an
// event recorded there makes a communication stream of the buckets' own wait for it, and the
// all-reduce (NCCL) runs on that stream while the compute stream goes on with the backward; the
// update's stream waits for each bucket's "summed" event before copying the sums back. The host
// never waits for the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include <echelon/parallel/process_group.h>
#include <echelon/tensor/tensor.h>

#if ECHELON_WITH_CUDA
#include <optional>

#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

struct AllReduceStats {
  int64_t buckets = 0;     // bucket sums started
  int64_t overlapped = 0;  // ... of which while the backward was still running
  int64_t bytes = 0;       // gradient bytes this process put into sums
  double wait_s = 0;  // blocked at the update, waiting for sums (not hidden by the backward; on a
                      // GPU only the host's enqueueing: the device waits, not the host)
};

class GradientBuckets {
 public:
  // `params`: the partition's parameters in forward order. `cap_bytes` 0: one bucket, summed only
  // at the update (no overlap).
  GradientBuckets(std::shared_ptr<ProcessGroup> replicas, std::vector<Tensor> params,
                  size_t cap_bytes);

  // Whether gradient_ready can start buckets early: a cap above 0.
  bool overlaps() const { return overlaps_; }
  // Autograd's LeafReadyFn during the backward an update follows: `leaf`'s gradient is final.
  void gradient_ready(const TensorImpl& leaf);
  // Right before the update: starts the buckets not started yet, waits for every sum and writes
  // it into the gradients.
  void finish();
  AllReduceStats stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<size_t> params;                     // indices into params_, last layer first
    size_t waiting = 0;                             // parameters not yet final in this backward
    Tensor flat;                                    // (numel) the gradients, then their sum
    std::unique_ptr<ProcessGroup::PendingSum> sum;  // CPU
#if ECHELON_WITH_CUDA
    std::optional<cuda::Event> summed;  // GPU: recorded on comm_stream_ after the all-reduce
#endif
  };
  void start(Bucket& bucket, bool early);
#if ECHELON_WITH_CUDA
  // Enqueues the bucket's all-reduce on comm_stream_, after the work queued on the caller's.
  void start_on_device(Bucket& bucket);
#endif
  // Starts, in order, every bucket whose gradients are all final.
  void start_ready_buckets();

  std::shared_ptr<ProcessGroup> replicas_;
  std::vector<Tensor> params_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const TensorImpl*, size_t> bucket_of_;  // parameter -> bucket index
  size_t next_ = 0;                                          // the next bucket to start
  bool overlaps_ = false;
  AllReduceStats stats_;
#if ECHELON_WITH_CUDA
  std::unique_ptr<cuda::Stream> comm_stream_;  // GPU: the all-reduces' stream (made at first use)
#endif
};

}  // namespace echelon::parallel
