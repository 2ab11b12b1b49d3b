// Transports: how activations (forward) and gradients (backward) travel between partitions.
// One interface, chosen per pair of devices by make_transport. In one process every transport is
// a lock-free SPSC ring of data/ring.h (each link has one sending and one receiving thread) plus
// what the pair of devices needs on either side:
//   ring         CPU -> CPU: the tensor handle moves, no copy.
//   cuda-stream  same GPU, different streams: the sender records an event after producing the
//                tensor, the receiver's stream waits on it (no host blocking, no copy).
//   cuda-peer    GPU -> other GPU: the receiver waits for the sender's event, then
//                cudaMemcpyPeerAsync into memory of its own device.
//   host-staged  any other pair (CPU <-> GPU): Tensor::to.
// A NCCL send/recv transport fits the same interface (send/recv of one Message per call).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
  // Flush: finish_epoch's, the end of the trainer's epoch (a later partition's process follows
  // the epochs by it: PipelineEngine::follow_epoch).
  bool epoch_end = false;
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
  // The same without blocking: nullopt when nothing has arrived (or once closed).
  virtual std::optional<Message> try_recv() = 0;
  // Aborts: wakes every waiter, later sends and receives fail, buffered messages are never
  // delivered. Used to shut the pipeline down on error and at destruction.
  virtual void close() = 0;
  virtual std::string kind() const = 0;
  // Seconds recv()/try_recv() spent taking message bodies in once their header had arrived: the
  // transfer itself, as opposed to waiting for the sender (MPI). 0 for the in-process
  // transports, which do not count it. Any thread may read it while the receiver runs.
  virtual double body_receive_s() const { return 0; }
};

// The transport for a pair of devices (see the table above). capacity: messages the channel
// buffers before send blocks (>= 1; rounded up to a power of two).
std::unique_ptr<Transport> make_transport(Device from, Device to, size_t capacity);

// A bare ring for two ends on ONE thread and stream (the inline 1-stage pipeline): the handle
// moves; no event is needed, and the receiver moves tensors to its device itself.
std::unique_ptr<Transport> make_local_transport(size_t capacity);

}  // namespace echelon::parallel
