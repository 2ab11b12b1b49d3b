// Joining the MPI world of a torchrun-style rendezvous (rendezvous.h); used by mpi_group.cpp.
// Only in builds with MPI.
#pragma once

#include <mpi.h>

#include <echelon/parallel/rendezvous.h>

namespace echelon::parallel {

// The world of the processes that met through `rendezvous` (MPI already initialised), ranked by
// their RANK. Throws echelon::Error when an MPI call fails.
MPI_Comm join_rendezvous_world(Rendezvous& rendezvous);

// Throws echelon::Error "MPI <what> failed: <MPI's text>" unless `code` is MPI_SUCCESS
// (mpi_group.cpp).
void check_mpi(int code, const char* what);

}  // namespace echelon::parallel
