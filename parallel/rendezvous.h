// torchrun-style rendezvous: processes started independently (by torchrun, a Slurm script, by
// hand or by `echelon launch --rdzv env`) with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
// MASTER_PORT, and no mpirun, meet here before they join one MPI world (mpi_group.cpp).
//
// Open MPI connects independently started processes (MPI_Comm_accept / MPI_Comm_connect) only
// through its `ompi-server`, so rank 0 starts one as a child process and every process points
// Open MPI at it (OMPI_MCA_pmix_server_uri) before MPI_Init. The only thing that travels over the
// rendezvous socket (MASTER_ADDR:MASTER_PORT, like torch's TCPStore) is a few lines of text:
// each rank's RANK and WORLD_SIZE, the ompi-server URI, the MPI port name. Every tensor goes
// over MPI.
//
// The sockets stay open for the whole run as a liveness watch: mpirun ends every process when one
// dies, and here nobody else would. A process that ends without saying goodbye (killed, crashed,
// aborted) closes its socket; rank 0 notices, tells every other rank, and they all exit non-zero
// naming that rank; when rank 0 itself is gone, every other rank notices directly.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace echelon::parallel {

struct RendezvousEnvironment {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  // MASTER_ADDR
  // MASTER_PORT; or ECHELON_RENDEZVOUS_PORT when set; or MASTER_PORT + 1 under torchrun, whose
  // agent serves its own store on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True)
  int master_port = 0;
  std::string port_name;  // which variable gave the port, for messages
  double timeout_s = 60;  // ECHELON_RENDEZVOUS_TIMEOUT: how long to wait for the other ranks
};

// The torchrun-style environment when RANK and WORLD_SIZE are set with WORLD_SIZE > 1 (nullopt
// otherwise). Throws naming the variable when one is malformed or missing (MASTER_ADDR,
// MASTER_PORT), or when RANK is not in [0, WORLD_SIZE).
std::optional<RendezvousEnvironment> rendezvous_environment();

class Rendezvous {
 public:
  // Before MPI_Init: rank 0 starts ompi-server and waits (up to the timeout) for every other rank
  // to connect to MASTER_ADDR:MASTER_PORT and say its RANK and WORLD_SIZE; the others connect
  // (retrying until the timeout). Afterwards OMPI_MCA_pmix_server_uri is set in this process.
  // Throws with a message naming the address, the rank and what went wrong; rank 0 also tells
  // every connected rank (duplicate RANK, WORLD_SIZE mismatch).
  explicit Rendezvous(const RendezvousEnvironment& environment);
  ~Rendezvous();  // closes the sockets, stops ompi-server (rank 0)
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const RendezvousEnvironment& environment() const { return env_; }

  // Rank 0: sends rank `rank` the MPI port name it connects to. Other ranks: waits for it (up to
  // the timeout; failing naming rank 0 when rank 0's process ended).
  void send_port(int rank, const std::string& port);
  std::string receive_port();

  // Starts the liveness watch (a thread); from then on a peer that ends without finish() ends
  // this process with status 1 and a line naming the rank that is gone.
  void watch();
  // The run ended well: says goodbye to the peers. Rank 0 then waits (bounded by the timeout)
  // until every other rank has said goodbye or closed, so ompi-server outlives their MPI_Finalize.
  void finish();
  // This process is failing: stops ompi-server (rank 0) without waiting for anyone; the peers
  // notice the closed socket.
  void abandon();

 private:
  struct Peer {
    int fd = -1;
    int rank = -1;
    std::string buffer;  // bytes read but not yet a whole line
    bool finished = false;
  };
  void gather_ranks(int listener);
  void connect_to_master();
  void start_ompi_server();
  void stop_ompi_server();
  void release();  // closes the peers' sockets, stops ompi-server, removes its folder
  void send_line(Peer& peer, const std::string& line);
  void watch_loop();
  void stop_watch();
  [[noreturn]] void fail_run(const std::string& why);

  RendezvousEnvironment env_;
  std::vector<Peer> peers_;  // rank 0: every other rank, by rank - 1; others: rank 0 only
  std::mutex send_mutex_;
  pid_t ompi_server_ = -1;
  std::string server_dir_;  // rank 0: ompi-server's URI file and log
  std::thread watcher_;
  int stop_pipe_[2] = {-1, -1};
  std::atomic<bool> finishing_{false};
  std::atomic<int> finished_peers_{0};
};

}  // namespace echelon::parallel
