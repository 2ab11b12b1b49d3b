// The MPI transport (mpi_transport.h): a message's header, then its tensor and label bytes with
// the same tag; sends complete in the background, bounded by the transport's capacity. Only in
// builds with MPI.
#if ECHELON_WITH_MPI
#include <echelon/parallel/mpi_transport.h>

#include <climits>
#include <cstring>
#include <deque>

#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/parallel/rendezvous_mpi.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel {

int count_of(size_t bytes) {
  ECH_CHECK(bytes <= static_cast<size_t>(INT_MAX), "MPI: a message of ", bytes,
            " bytes exceeds the 2 GiB per-message limit");
  return static_cast<int>(bytes);
}

bool wait_for(MPI_Request& request, const std::atomic<bool>* closed) {
  Backoff backoff;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return true;
    if (closed != nullptr && closed->load()) {
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      return false;
    }
    backoff.pause();
  }
}

namespace {

constexpr int kMaxDims = 8;

// The fixed-size part of a Message; the tensor and label bytes follow with the same tag.
struct WireHeader {
  int64_t id = -1, batch_index = -1;
  double loss_weight = 1, lr = 0;
  uint8_t kind = 0, schedule = 0, epoch_end = 0;
  uint8_t dtype[2] = {0, 0};
  int32_t dims[2] = {-1, -1};   // -1: undefined tensor
  uint8_t by_nccl[2] = {0, 0};  // the bytes follow over NCCL (device to device), not MPI
  int64_t shape[2][kMaxDims] = {};
};

// A message being sent: its header and host tensors stay alive until MPI is done with them.
struct PendingSend {
  WireHeader header;
  Tensor parts[2];
  MPI_Request requests[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

Tensor host_contiguous(const Tensor& tensor) {
  if (!tensor.defined()) return tensor;
  Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  return host.contiguous();
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(MPI_Comm comm, int peer, int tag, Device local, size_t capacity,
               std::unique_ptr<NcclLink> nccl)
      : comm_(comm),
        peer_(peer),
        tag_(tag),
        local_(local),
        capacity_(std::max<size_t>(1, capacity)),
        nccl_(std::move(nccl)) {}
  ~MpiTransport() override {
    reap();
    for (auto& pending : pending_) {
      for (MPI_Request& request : pending->requests) {
        if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
      }
      // Only after an abort can a send still be pending; MPI may yet read its buffers, so they
      // stay allocated (the process is about to end).
      (void)pending.release();
    }
  }

  bool send(Message message) override {
    Backoff backoff;
    reap();
    while (pending_.size() >= capacity_) {
      if (closed_) return false;
      backoff.pause();
      reap();
    }
    if (closed_) return false;
    auto pending = std::make_unique<PendingSend>();
    describe(message, *pending);
    check_mpi(MPI_Isend(&pending->header, sizeof(WireHeader), MPI_BYTE, peer_, tag_, comm_,
                        &pending->requests[0]),
              "MPI_Isend");
    for (int i = 0; i < 2; ++i) {
      const Tensor& part = pending->parts[i];
      if (!part.defined() || part.nbytes() == 0) continue;
#if ECHELON_WITH_NCCL
      if (pending->header.by_nccl[i]) {
        nccl_->send(part);
        continue;
      }
#endif
      check_mpi(MPI_Isend(part.raw_data(), count_of(part.nbytes()), MPI_BYTE, peer_, tag_, comm_,
                          &pending->requests[1 + i]),
                "MPI_Isend");
    }
    pending_.push_back(std::move(pending));
    return true;
  }

  std::optional<Message> recv() override {
    return receive();
  }

  std::optional<Message> try_recv() override {
    if (closed_) return std::nullopt;
    int arrived = 0;
    check_mpi(MPI_Iprobe(peer_, tag_, comm_, &arrived, MPI_STATUS_IGNORE), "MPI_Iprobe");
    return arrived ? receive() : std::nullopt;
  }

  void close() override {
    closed_ = true;
  }
  std::string kind() const override {
    return nccl_ ? "nccl" : "mpi";
  }
  double body_receive_s() const override {
    return 1e-9 * static_cast<double>(body_ns_.load());
  }

 private:
  void describe(const Message& message, PendingSend& pending) {
    WireHeader& h = pending.header;
    h.id = message.id;
    h.batch_index = message.batch_index;
    h.loss_weight = message.loss_weight;
    h.lr = message.lr;
    h.kind = static_cast<uint8_t>(message.kind);
    h.schedule = static_cast<uint8_t>(message.schedule);
    h.epoch_end = message.epoch_end ? 1 : 0;
    const Tensor* sources[2] = {&message.tensor, &message.labels};
    for (int i = 0; i < 2; ++i) {
      const bool device_bytes = nccl_ && sources[i]->defined() && sources[i]->is_cuda();
      pending.parts[i] = device_bytes ? sources[i]->contiguous() : host_contiguous(*sources[i]);
      const Tensor& part = pending.parts[i];
      if (!part.defined()) continue;
      h.by_nccl[i] = device_bytes ? 1 : 0;
      ECH_CHECK(part.dim() <= kMaxDims, "MPI transport: a tensor of ", part.dim(),
                " dimensions (at most ", kMaxDims, ")");
      h.dims[i] = static_cast<int32_t>(part.dim());
      h.dtype[i] = static_cast<uint8_t>(part.dtype());
      std::copy(part.shape().begin(), part.shape().end(), h.shape[i]);
    }
  }

  // Drops the sends MPI has finished with, oldest first.
  void reap() {
    while (!pending_.empty()) {
      int done = 0;
      check_mpi(MPI_Testall(3, pending_.front()->requests, &done, MPI_STATUSES_IGNORE),
                "MPI_Testall");
      if (!done) return;
      pending_.pop_front();
    }
  }

  std::optional<Message> receive() {
    WireHeader h;
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Irecv(&h, sizeof(WireHeader), MPI_BYTE, peer_, tag_, comm_, &request),
              "MPI_Irecv");
    if (!wait_for(request, &closed_)) return std::nullopt;
    // From here on the sender has sent: what follows is the bodies' transfer (and, for a GPU
    // partition without NCCL, the copy onto the device).
    const auto body_start = std::chrono::steady_clock::now();
    Message message;
    message.id = h.id;
    message.batch_index = h.batch_index;
    message.loss_weight = h.loss_weight;
    message.lr = h.lr;
    message.kind = static_cast<Message::Kind>(h.kind);
    message.schedule = static_cast<ScheduleKind>(h.schedule);
    message.epoch_end = h.epoch_end != 0;
    Tensor* targets[2] = {&message.tensor, &message.labels};
    for (int i = 0; i < 2; ++i) {
      if (h.dims[i] < 0) continue;
      const Shape shape(h.shape[i], h.shape[i] + h.dims[i]);
#if ECHELON_WITH_NCCL
      if (h.by_nccl[i]) {
        ECH_CHECK(nccl_ != nullptr, "rank ", peer_, " sent device bytes over NCCL, but this ",
                  "partition is on ", local_.to_string());
        *targets[i] = nccl_->recv(shape, static_cast<DType>(h.dtype[i]));
        continue;
      }
#endif
      Tensor part = Tensor::empty(shape, static_cast<DType>(h.dtype[i]), Device::cpu());
      if (part.nbytes() > 0) {
        check_mpi(MPI_Irecv(part.raw_data(), count_of(part.nbytes()), MPI_BYTE, peer_, tag_, comm_,
                            &request),
                  "MPI_Irecv");
        if (!wait_for(request, &closed_)) return std::nullopt;
      }
      *targets[i] = local_.is_cpu() ? part : part.to(local_);
    }
    body_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - body_start)
                    .count();
    return message;
  }

  MPI_Comm comm_;
  int peer_, tag_;
  Device local_;
  size_t capacity_;
  std::atomic<bool> closed_{false};
  std::deque<std::unique_ptr<PendingSend>> pending_;
  std::atomic<int64_t> body_ns_{0};  // body_receive_s, in nanoseconds
  std::unique_ptr<NcclLink> nccl_;   // null: every byte goes over MPI (through the host)
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm, int peer, int tag, Device local,
                                              size_t capacity, std::unique_ptr<NcclLink> nccl) {
  return std::make_unique<MpiTransport>(comm, peer, tag, local, capacity, std::move(nccl));
}

}  // namespace echelon::parallel

#endif  // ECHELON_WITH_MPI
