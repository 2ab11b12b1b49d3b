// `echelon launch [--nproc-per-node N] [--nnodes M --hostfile FILE] -- train ...`: starts the
// processes of a multi-process run through Open MPI's launcher, as `torchrun --nproc-per-node N`
// starts PyTorch's. The launcher is mpirun (an existing engine: we build no networking of our
// own); `launch` only works out the process count from the train flags, checks the train command
// before any process starts, and adds the options a local run needs (run as root in a container,
// more processes than cores, no core binding: each rank runs its own thread pool).
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
  std::vector<std::string> argv;  // finished: the mpirun command line to exec
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

}  // namespace echelon::app
