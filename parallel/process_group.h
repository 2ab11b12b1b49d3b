// Process groups: the processes of one multi-process run (one per pipeline partition and
// data-parallel replica), as started by `mpirun` or torchrun-style (rendezvous.h). The pipeline
// engine uses a group for
//   - the transports between partitions living in different processes (make_transport),
//   - the gradient all-reduce across the replicas of one partition (all_reduce_sum, or
//     start_all_reduce_sum per gradient bucket while the backward still runs),
//   - bringing every partition's parameters and optimizer state to every process (broadcast),
//   - relaying the last partition's per-mini-batch results to every process (send_bytes).
// Backend: MPI (Open MPI from Debian), initialised with MPI_THREAD_MULTIPLE because a stage's
// executor thread and the driver's thread both communicate. No home-made networking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <echelon/parallel/transport.h>
#include <echelon/tensor/device.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parallel {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi"
  virtual std::string host() const = 0;     // this process's host name

  // A transport to (send) or from (recv) `peer`; each one is used in one direction only. Messages
  // with the same (peer, tag) arrive in order. Received tensors land on `local`. Sends are
  // buffered: up to `capacity` messages may be in flight before send() waits, like a ring.
  virtual std::unique_ptr<Transport> make_transport(int peer, int tag, Device local,
                                                    size_t capacity) = 0;
  // Sums each tensor (float32/float64, CPU) over the group, in place; every process passes
  // tensors of the same shapes in the same order.
  virtual void all_reduce_sum(std::vector<Tensor>& tensors) = 0;
  // A sum over the group that proceeds while the caller computes (MPI_Iallreduce): `flat` (CPU,
  // contiguous, float32/float64) holds the sum once wait() has returned, and nobody may touch it
  // before. Every process starts the same sums in the same order, from one thread at a time.
  class PendingSum {
   public:
    virtual ~PendingSum() = default;
    virtual void wait() = 0;
  };
  virtual std::unique_ptr<PendingSum> start_all_reduce_sum(const Tensor& flat) = 0;
  // Copies `tensor` (CPU, contiguous) of process `root` into every process's tensor, in place.
  virtual void broadcast(Tensor& tensor, int root) = 0;
  virtual void barrier() = 0;
  // Small control messages: send_bytes never blocks (the group keeps the buffer until it has
  // gone); recv_bytes blocks, try_recv_bytes does not. Both return (source rank, bytes).
  virtual void send_bytes(const std::vector<uint8_t>& bytes, int dest, int tag) = 0;
  virtual std::pair<int, std::vector<uint8_t>> recv_bytes(int tag) = 0;
  virtual std::optional<std::pair<int, std::vector<uint8_t>>> try_recv_bytes(int tag) = 0;
  // The processes with the same `color`, ordered by `key` (collective over this group).
  virtual std::shared_ptr<ProcessGroup> split(int color, int key) = 0;
  // Ends EVERY process of the run with `code` (the launcher reports which rank aborted).
  [[noreturn]] virtual void abort(int code) = 0;
};

// Whether this build can start a process group (compiled with MPI).
bool process_groups_available();

// The run's world group when this process was started by a launcher (mpirun: OMPI_COMM_WORLD_*,
// or PMI_SIZE / PMIX_RANK), or with torchrun-style variables (RANK, WORLD_SIZE > 1, MASTER_ADDR,
// MASTER_PORT: the processes meet through rendezvous.h first), else nullptr. Also nullptr for a
// world of one process. Throws when a launcher or RANK/WORLD_SIZE is found but this build has no
// MPI, or when the rendezvous fails, naming the variables. The first call initialises MPI; MPI is
// finalised when the last reference to the world group goes.
std::shared_ptr<ProcessGroup> world_process_group();

}  // namespace echelon::parallel
