// CUDA emulation: which MPI communicator the emulated NCCL (cuda/sim/nccl.h) bootstraps its
// communicators over. MPI_COMM_WORLD by default; processes that met through a rendezvous
// (parallel/rendezvous.h) are singletons there and name their joined world instead.
#pragma once

#include <mpi.h>

namespace echelon::cudasim {

// `world` must hold every process that will share an NCCL communicator, and must stay valid
// while communicators are made; only bootstrap messages (tags 20000..29999) travel on it.
void set_nccl_bootstrap(MPI_Comm world);

}  // namespace echelon::cudasim
