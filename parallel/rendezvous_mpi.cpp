// The MPI half of the torchrun-style rendezvous (rendezvous_mpi.h): connect/accept through the
// ompi-server that rendezvous.cpp started, merged into one intracommunicator.
#if ECHELON_WITH_MPI

#include <echelon/parallel/rendezvous_mpi.h>

#include <algorithm>
#include <string>

#include <echelon/base/error.h>

namespace echelon::parallel {

// The world grows one process
// at a time: the members so far accept (collectively) on rank 0's port, the next RANK connects
// alone, and the merge puts the newcomer last. Rank 0 hands rank r the port only once ranks
// 0..r-1 are one group, so no newcomer can take another's turn.
MPI_Comm join_rendezvous_world(Rendezvous& rendezvous) {
  const RendezvousEnvironment& env = rendezvous.environment();
  char port[MPI_MAX_PORT_NAME] = {};
  MPI_Comm group = MPI_COMM_SELF;
  const auto replace_group = [&group](MPI_Comm merged) {
    if (group != MPI_COMM_SELF) MPI_Comm_free(&group);
    group = merged;
  };
  if (env.rank == 0) {
    check_mpi(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port");
    rendezvous.watch();
  } else {
    const std::string name = rendezvous.receive_port();
    ECH_CHECK(name.size() < sizeof(port), "rendezvous: an MPI port name of ", name.size(),
              " bytes");
    std::copy(name.begin(), name.end(), port);
    rendezvous.watch();
    MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    check_mpi(MPI_Comm_connect(port, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter), "MPI_Comm_connect");
    check_mpi(MPI_Intercomm_merge(inter, /*high=*/1, &merged), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    replace_group(merged);
  }
  for (int next = env.rank + 1; next < env.world_size; ++next) {
    if (env.rank == 0) rendezvous.send_port(next, port);
    MPI_Comm inter = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    check_mpi(MPI_Comm_accept(port, MPI_INFO_NULL, 0, group, &inter), "MPI_Comm_accept");
    check_mpi(MPI_Intercomm_merge(inter, /*high=*/0, &merged), "MPI_Intercomm_merge");
    MPI_Comm_free(&inter);
    replace_group(merged);
  }
  if (env.rank == 0) MPI_Close_port(port);
  int rank = -1, size = 0;
  MPI_Comm_rank(group, &rank);
  MPI_Comm_size(group, &size);
  ECH_CHECK(rank == env.rank && size == env.world_size, "rendezvous: RANK=", env.rank,
            " became rank ", rank, " of ", size, " processes");
  return group;
}

}  // namespace echelon::parallel

#endif  // ECHELON_WITH_MPI
