// `echelon launch [--nproc-per-node N] [--nnodes M --hostfile FILE] -- train ...`: starts the
// processes of a multi-process run through Open MPI's launcher, as `torchrun --nproc-per-node N`
// starts PyTorch's. The launcher is mpirun (an existing engine: we build no networking of our
// own); `launch` only works out the process count from the train flags, checks the train command
// before any process starts, and adds the options a local run needs (run as root in a container,
// more processes than cores, no core binding: each rank runs its own thread pool).
//
// `echelon launch --rdzv env [--nnodes M --node-rank I --master-addr A --master-port P] -- train`
// starts this node's N processes itself, torchrun-style: each gets RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and they meet through the rendezvous
// (parallel/rendezvous.h). It waits for them, ends the others when one fails (naming it) and
// passes Ctrl-C on.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace echelon::app {

struct LaunchCommand {
  CLI::App* launch = nullptr;  // the subcommand, to ask whether it was given
  int nproc_per_node = 0;      // 0 = --pipeline K x --data-parallel R of the train command / nodes
  int nnodes = 1;
  std::string hostfile;
  std::string mpirun;                 // empty = $ECHELON_MPIRUN, else `mpirun` on PATH
  std::vector<std::string> mpi_args;  // passed to mpirun as they are
  bool dry_run = false;
  std::string rendezvous = "mpirun";  // --rdzv: "mpirun" or "env" (torchrun-style variables)
  int node_rank = 0;                  // --rdzv env: this node's index among --nnodes
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;        // torchrun's default
  int world_size = 0;             // finished: K x R
  std::vector<std::string> argv;  // finished: the mpirun command line to exec (--rdzv env: the
                                  // command every local rank runs)
};

// Registers `launch` under `root`; parse_command_line calls finish_launch_command after parsing.
void add_launch_command(CLI::App& root, LaunchCommand& command);

// Where launch's own flags end: the index of `--` in argv (argc when there is none). The parser
// gives CLI11 only the flags before it; the words after it are the rank command.
int launch_flags_end(int argc, const char* const* argv);

// Checks the rank command (the words after `--`: `train ...`, exactly what every rank will parse)
// and builds `argv`. `self` is the echelon binary each rank runs. Throws echelon::Error naming
// the flag at fault.
void finish_launch_command(LaunchCommand& command, const std::vector<std::string>& rank_command,
                           const std::string& self);

// The command line as a shell would read it (for --dry-run and the log line).
std::string shell_quoted(const std::vector<std::string>& argv);

// Replaces this process with mpirun (returns only by throwing, naming the launcher).
[[noreturn]] void exec_launch(const LaunchCommand& command);

// --rdzv env: the variables of local rank `local` ("RANK=3", "LOCAL_RANK=1", ...).
std::vector<std::string> rank_environment(const LaunchCommand& command, int local);

// --rdzv env: starts this node's ranks and waits for them; returns 0 when all succeeded, else
// the status of the first that failed (128 + signal when one was killed; 130 after Ctrl-C).
int run_local_ranks(const LaunchCommand& command);

}  // namespace echelon::app
