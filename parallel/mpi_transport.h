// The MPI transport of a process group (mpi_group.cpp) and the polling both use. Every blocking
// wait polls (MPI_Test with a short back-off) instead of blocking inside MPI, so that closing a
// transport wakes its waiter, and so that both threads of a process keep MPI's progress engine
// turning. Only in builds with MPI.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <thread>

#include <echelon/parallel/transport.h>

#if ECHELON_WITH_NCCL
#include <echelon/parallel/nccl_comm.h>
#endif

namespace echelon::parallel {

// `bytes` as an MPI count; throws past MPI's 2 GiB per-message limit.
int count_of(size_t bytes);

// Spins briefly, then sleeps up to 200 us: latency stays far below a pipeline step while an idle
// waiter leaves the (possibly shared) core to the compute threads.
class Backoff {
 public:
  void pause() {
    if (++rounds_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, rounds_)));
  }

 private:
  int rounds_ = 0;
};

// Waits for `request`; false (the request cancelled) once `closed` becomes true first.
bool wait_for(MPI_Request& request, const std::atomic<bool>* closed);

#if ECHELON_WITH_NCCL
using NcclLink = NcclChannel;  // nccl_comm.h: tensor bytes device to device
#else
struct NcclLink {};
#endif

// The transport to `peer` over `comm` with message tag `tag` (MpiGroup::connect): headers and
// host tensors over MPI, device tensors over `nccl` when given (else through the host).
std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm, int peer, int tag, Device local,
                                              size_t capacity, std::unique_ptr<NcclLink> nccl);

}  // namespace echelon::parallel
