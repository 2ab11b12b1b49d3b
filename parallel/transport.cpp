#include <echelon/parallel/transport.h>

#include <utility>

#include <echelon/base/error.h>
#include <echelon/data/ring.h>

#if ECHELON_WITH_CUDA
#include <cuda_runtime.h>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#endif

namespace echelon::parallel {

namespace {

// Every in-process transport: the ring carries the message; subclasses add what their pair of
// devices needs on the sending side (prepare) and the receiving side (arrive).
class RingTransport : public Transport {
 public:
  explicit RingTransport(size_t capacity) : ring_(capacity) {}
  bool send(Message message) final {
    // SpscRing reads `closed` only when full (data/ring.h); a transport refuses every send once
    // closed (a send racing with close() may still return true: deliver() drops it either way).
    if (ring_.closed()) return false;
    prepare(message);
    return ring_.push(std::move(message));
  }
  std::optional<Message> recv() final { return deliver(ring_.pop()); }
  std::optional<Message> try_recv() final { return deliver(ring_.try_pop()); }
  void close() final { ring_.close(); }
  std::string kind() const override { return "ring"; }

 protected:
  virtual void prepare(Message& /*message*/) {}
  virtual void arrive(Message& /*message*/) {}

 private:
  std::optional<Message> deliver(std::optional<Message> message) {
    // A closed ring still hands out what it buffered; a closed transport is aborted and drops it
    // (the rest is freed with the ring).
    if (!message || ring_.closed()) return std::nullopt;
    arrive(*message);
    return message;
  }

  data::SpscRing<Message> ring_;
};

#if ECHELON_WITH_CUDA
// Orders the receiver's current stream after the sender's work, without blocking the host.
void wait_ready(const Message& message, int device) {
  if (!message.ready) return;
  cuda::DeviceGuard guard(device);  // stream 0 means the legacy stream of the current device
  message.ready->wait(cuda::current_stream(device));
}

// The receiver's stream now uses memory that the sender's stream allocated: the caching allocator
// must not hand it back to the sender's stream before the receiver's queued work is done, even if
// the sender's thread drops the last reference (autograd keeps activations until backward).
void mark_used_here(const Tensor& tensor, int device) {
  if (tensor.defined() && tensor.is_cuda() && tensor.storage()->data())
    cuda::record_stream(device, tensor.storage()->data(), cuda::current_stream(device));
}

std::shared_ptr<cuda::Event> record_ready(int device) {
  // An event can only be recorded on a stream of the device it was created on; the sending
  // thread (e.g. the driver feeding partition 0) may have another device current.
  cuda::DeviceGuard guard(device);
  auto event = std::make_shared<cuda::Event>();
  event->record(cuda::current_stream(device));
  return event;
}
#endif

// A ring between two given devices.
class DeviceTransport : public RingTransport {
 public:
  DeviceTransport(Device from, Device to, size_t capacity)
      : RingTransport(capacity), from_(from), to_(to) {}

 protected:
  Device from_, to_;
};

// Between a host and a device: a synchronous Tensor::to on the receiving side.
class HostStagedTransport : public DeviceTransport {
 public:
  using DeviceTransport::DeviceTransport;
  std::string kind() const override { return "host-staged"; }

 private:
  void prepare([[maybe_unused]] Message& message) override {
#if ECHELON_WITH_CUDA
    if (from_.is_cuda()) message.ready = record_ready(from_.index);
#endif
  }
  void arrive(Message& message) override {
#if ECHELON_WITH_CUDA
    // The copy runs on this thread's stream, which knows nothing of the sender's.
    if (message.ready) message.ready->synchronize();
#endif
    if (message.tensor.defined()) message.tensor = message.tensor.to(to_);
    if (message.labels.defined()) message.labels = message.labels.to(to_);
  }
};

#if ECHELON_WITH_CUDA
// Same GPU, another stream: an event carries the ordering; the memory is shared.
class StreamTransport : public DeviceTransport {
 public:
  using DeviceTransport::DeviceTransport;
  std::string kind() const override { return "cuda-stream"; }

 private:
  void prepare(Message& message) override { message.ready = record_ready(from_.index); }
  void arrive(Message& message) override {
    wait_ready(message, to_.index);
    mark_used_here(message.tensor, to_.index);
    mark_used_here(message.labels, to_.index);
  }
};

// GPU -> GPU: the receiver copies peer-to-peer on its own stream. With peer access enabled the
// copy goes straight over NVLink/PCIe; without it (devices on different PCIe roots) the driver
// stages it through host memory, which the kind names.
class PeerTransport : public DeviceTransport {
 public:
  PeerTransport(Device from, Device to, size_t capacity)
      : DeviceTransport(from, to, capacity),
        direct_(cuda::enable_peer_access(to.index, from.index) &&
                cuda::enable_peer_access(from.index, to.index)) {}
  std::string kind() const override { return direct_ ? "cuda-peer" : "cuda-peer-staged"; }

 private:
  void prepare(Message& message) override { message.ready = record_ready(from_.index); }
  void arrive(Message& message) override {
    // A host wait, not a stream wait: a non-contiguous source is packed by contiguous() on this
    // thread's stream of the sender's device, which knows nothing of the sender's stream. The
    // copy below blocks the host anyway.
    if (message.ready) message.ready->synchronize();
    message.tensor = copy_peer(message.tensor);
    message.labels = copy_peer(message.labels);
  }

  Tensor copy_peer(const Tensor& source) {
    if (!source.defined()) return source;
    const Tensor src = source.contiguous();
    Tensor dst = Tensor::empty(src.shape(), src.dtype(), to_);
    cudaStream_t stream = cuda::current_stream(to_.index);
    ECH_CUDA_CHECK(cudaMemcpyPeerAsync(dst.raw_data(), to_.index, src.raw_data(), from_.index,
                                       src.nbytes(), stream));
    // The sender's caching allocator may reuse src's block as soon as src dies; wait for the copy
    // before dropping it. The receiver needs the data next anyway.
    cuda::Event copied;
    copied.record(stream);
    copied.synchronize();
    return dst;
  }

  const bool direct_;
};
#endif

}  // namespace

std::unique_ptr<Transport> make_transport(Device from, Device to, size_t capacity) {
  if (from.is_cpu() && to.is_cpu()) return std::make_unique<RingTransport>(capacity);
#if ECHELON_WITH_CUDA
  if (from.is_cuda() && to.is_cuda()) {
    if (from.index == to.index) return std::make_unique<StreamTransport>(from, to, capacity);
    return std::make_unique<PeerTransport>(from, to, capacity);
  }
#endif
  return std::make_unique<HostStagedTransport>(from, to, capacity);
}

std::unique_ptr<Transport> make_local_transport(size_t capacity) {
  return std::make_unique<RingTransport>(capacity);
}

}  // namespace echelon::parallel
