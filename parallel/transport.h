// Transports: how activations (forward) and gradients (backward) travel between partitions.
// One interface, chosen per pair of devices by make_transport:
//   ring         CPU -> CPU: a bounded in-process queue; the tensor handle moves, no copy.
//   cuda-stream  same GPU, different streams: the sender records an event after producing the
//                tensor, the receiver's stream waits on it (no host blocking, no copy).
//   cuda-peer    GPU -> other GPU: the receiver waits for the sender's event, then
//                cudaMemcpyPeerAsync into memory of its own device.
//   host-staged  any other pair (CPU <-> GPU): Tensor::to.
// A NCCL send/recv transport fits the same interface (send/recv of one Message per call).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <echelon/base/error.h>
#include <echelon/parallel/schedule.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/tensor.h>

namespace echelon::cuda {
class Event;
}

namespace echelon::parallel {

struct Message {
  enum class Kind : uint8_t { Forward, Backward, Flush };
  Kind kind = Kind::Forward;
  int64_t id = -1;           // pipeline-wide mini-batch (or micro-batch) number
  int64_t batch_index = -1;  // Batch::index of the trainer's mini-batch, for reports
  Tensor tensor;  // activation (N, ...) or its gradient; undefined gradient = skip the update
  Tensor labels;  // (N) int64, travels with the activations to the last partition
  double loss_weight = 1;  // share of the mini-batch's mean loss (gpipe micro-batches)
  double lr = 0;           // learning rate for this mini-batch's update (set by the driver)
  ScheduleKind schedule = ScheduleKind::Stale;  // Flush: the schedule to run after it
  std::shared_ptr<cuda::Event> ready;  // CUDA: recorded on the sender's stream after `tensor`
};

class Transport {
 public:
  virtual ~Transport() = default;
  // Blocks while the channel is full; returns false (dropping the message) once closed.
  virtual bool send(Message message) = 0;
  // Blocks until a message arrives; nullopt once closed. The tensor is on the receiver's device
  // and ordered before the receiver's current stream.
  virtual std::optional<Message> recv() = 0;
  // Wakes every waiter; later sends and receives fail. Used to shut the pipeline down on error.
  virtual void close() = 0;
  virtual std::string kind() const = 0;
};

// A bounded FIFO (mutex + condition variables): the only place pipeline threads meet. Blocking is
// what the executors want (an idle partition should sleep, not spin on the shared cores).
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {
    ECH_CHECK(capacity >= 1, "transport: capacity must be >= 1, got ", capacity);
  }
  // Blocks while full; false once closed.
  bool push(T item) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // Blocks while empty; nullopt once closed.
  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    return take(lock);
  }
  std::optional<T> try_pop() {
    std::unique_lock lock(mutex_);
    return take(lock);
  }
  // Wakes every waiter; buffered items are dropped now (freeing activations), not at destruction.
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    items_.clear();
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  std::optional<T> take(std::unique_lock<std::mutex>&) {
    if (closed_ || items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<T> items_;
  size_t capacity_;
  bool closed_ = false;
};

// capacity: messages the channel buffers before send blocks (>= 1).
std::unique_ptr<Transport> make_transport(Device from, Device to, size_t capacity);

}  // namespace echelon::parallel
