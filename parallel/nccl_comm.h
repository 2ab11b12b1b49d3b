// NCCL for GPU tensors: one communicator per group of processes and device, its unique id
// handed out by whoever bootstraps the group (MPI broadcasts it in mpi_group.cpp; one process
// needs no exchange). Every operation is enqueued on the caller's current stream of the
// communicator's device, so it is ordered after the kernels that produced its tensors and before
// those that use the result, without blocking the host. Only in CUDA builds with NCCL
// (ECHELON_WITH_NCCL).
#pragma once

#if ECHELON_WITH_NCCL

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <echelon/cuda/stream.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parallel {

class NcclCommunicator {
 public:
  // NCCL's unique id: 128 opaque bytes, made by rank 0 and given to every rank.
  using UniqueId = std::array<char, 128>;
  // Collective over the `size` processes: `share_id` must fill rank 0's id into every rank's.
  NcclCommunicator(int size, int rank, int device,
                   const std::function<void(UniqueId& id)>& share_id);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const { return size_; }
  int rank() const { return rank_; }
  int device() const { return device_; }
  // Sums each tensor (float32/float64, contiguous, on this device) over the group, in place; one
  // NCCL group call for all of them.
  void all_reduce_sum(const std::vector<Tensor>& tensors);
  // Point-to-point: `tensor` (contiguous, on this device) to / from rank `peer` (itself allowed).
  // A send and the matching receive must both be enqueued before either can complete; use
  // exchange() when a rank sends to and receives from peers in one step.
  void exchange(const std::vector<std::pair<Tensor, int>>& sends,
                const std::vector<std::pair<Tensor, int>>& receives);

  static std::string version();  // "2.27.3"

 private:
  struct Handle;
  std::unique_ptr<Handle> handle_;
  int size_, rank_, device_;
};

// GPU -> GPU bytes of one transport: a 2-process communicator used in one direction only (so a
// send never waits behind a receive) and a stream of its own, ordered with the caller's current
// stream by events; the caching allocator learns that this stream used each block.
class NcclChannel {
 public:
  // `peer_in_pair`: the other process's rank in the pair (0 or 1); `share` as above.
  NcclChannel(int peer_in_pair, int device,
              const std::function<void(NcclCommunicator::UniqueId&)>& share)
      : comm_(2, 1 - peer_in_pair, device, share), stream_(device), peer_(peer_in_pair) {}
  // Enqueues the send after the caller's queued work; returns without waiting for the peer.
  void send(const Tensor& tensor);
  // A new tensor on this device; the caller's stream waits for its arrival (the host does not).
  Tensor recv(const Shape& shape, DType dtype);

 private:
  NcclCommunicator comm_;
  cuda::Stream stream_;
  int peer_;
};

}  // namespace echelon::parallel

#endif
