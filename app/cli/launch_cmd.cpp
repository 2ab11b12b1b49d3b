// `echelon launch`: the train command's process count -> one mpirun command line (launch_cmd.h).
#include <echelon/app/cli/launch_cmd.h>

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <echelon/app/cli/command.h>
#include <echelon/base/error.h>
#include <echelon/parallel/process_group.h>

namespace echelon::app {

void add_launch_command(CLI::App& root, LaunchCommand& command) {
  CLI::App* launch = root.add_subcommand(
      "launch",
      "Start a multi-process run through mpirun: echelon launch [flags] -- train --pipeline K ...");
  launch->add_option("--nproc-per-node", command.nproc_per_node,
                     "Processes per node; 0 = --pipeline K x --data-parallel R / --nnodes");
  launch->add_option("--nnodes", command.nnodes, "Nodes (more than 1 needs --hostfile)");
  launch->add_option("--hostfile", command.hostfile, "Open MPI hostfile naming the nodes");
  launch->add_option("--mpirun", command.mpirun,
                     "The launcher (default: $ECHELON_MPIRUN, else mpirun on PATH)");
  launch
      ->add_option("--mpi-arg", command.mpi_args,
                   "One extra mpirun argument, passed as it is (repeatable)")
      ->allow_extra_args(false);
  launch->add_flag("--dry-run", command.dry_run, "Print the mpirun command instead of running it");
  launch->footer(
      "The words after -- are the run every rank starts, e.g.\n"
      "  echelon launch -- train --model resnet20 --pipeline 2 --data-parallel 2   (4 processes)");
  command.launch = launch;
}

int launch_flags_end(int argc, const char* const* argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) return i;
  return argc;
}

void finish_launch_command(LaunchCommand& c, const std::vector<std::string>& rank_command,
                           const std::string& self) {
  ECH_CHECK(parallel::process_groups_available(), "launch: this echelon was built without MPI; ",
            "install openmpi-bin and libopenmpi-dev and reconfigure (-DECHELON_MPI=ON)");
  ECH_CHECK(!rank_command.empty(),
            "launch: give the run after --, e.g. echelon launch -- train --pipeline 2 ...");
  ECH_CHECK(rank_command[0] == "train", "launch: starts `train` runs only (got '", rank_command[0],
            "'); eval, models and bench run in one process");
  ECH_CHECK(c.nnodes >= 1, "--nnodes must be >= 1, got ", c.nnodes);
  ECH_CHECK(c.nproc_per_node >= 0, "--nproc-per-node must be >= 0, got ", c.nproc_per_node);
  ECH_CHECK(c.nnodes == 1 || !c.hostfile.empty(), "--nnodes ", c.nnodes,
            " needs --hostfile naming the nodes");
  ECH_CHECK(c.hostfile.empty() || std::filesystem::is_regular_file(c.hostfile), "--hostfile '",
            c.hostfile, "' is not a file");

  // Every rank parses this very command: check it once here, before any process starts.
  std::vector<const char*> words{"echelon"};
  for (const std::string& word : rank_command) words.push_back(word.c_str());
  const Command run = parse_command_line(static_cast<int>(words.size()), words.data());
  ECH_CHECK(run.kind == Command::Kind::Train, "launch: the command after -- printed its help; ",
            "give the run's flags instead");
  const parallel::PipelineOptions& engine = run.pipeline.options;
  const int needed = engine.partitions * engine.data_parallel;
  ECH_CHECK(needed > 1, "launch: --pipeline ", engine.partitions, " x --data-parallel ",
            engine.data_parallel, " is one process: run `echelon train` directly");
  if (c.nproc_per_node == 0) {
    ECH_CHECK(needed % c.nnodes == 0, "launch: --pipeline ", engine.partitions,
              " x --data-parallel ", engine.data_parallel, " = ", needed,
              " processes do not split evenly over --nnodes ", c.nnodes);
    c.nproc_per_node = needed / c.nnodes;
  }
  ECH_CHECK(c.nproc_per_node * c.nnodes == needed, "launch: --nproc-per-node ", c.nproc_per_node,
            " x --nnodes ", c.nnodes, " = ", c.nproc_per_node * c.nnodes,
            " processes, but --pipeline ", engine.partitions, " x --data-parallel ",
            engine.data_parallel, " needs ", needed);

  const char* launcher = std::getenv("ECHELON_MPIRUN");
  c.argv = {!c.mpirun.empty() ? c.mpirun : launcher != nullptr ? launcher : "mpirun"};
  // Open MPI refuses root unless told; containers often run as root.
  if (geteuid() == 0) c.argv.push_back("--allow-run-as-root");
  // Each rank runs its own thread pool (--threads), which a binding to one core would serialise.
  c.argv.insert(c.argv.end(), {"--bind-to", "none"});
  if (c.hostfile.empty()) {
    c.argv.push_back("--oversubscribe");  // torchrun-like: more ranks than cores is allowed
  } else {
    c.argv.insert(c.argv.end(), {"--hostfile", c.hostfile, "--map-by",
                                 "ppr:" + std::to_string(c.nproc_per_node) + ":node"});
  }
  c.argv.insert(c.argv.end(), c.mpi_args.begin(), c.mpi_args.end());
  c.argv.insert(c.argv.end(), {"-np", std::to_string(needed), self});
  c.argv.insert(c.argv.end(), rank_command.begin(), rank_command.end());
}

std::string shell_quoted(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& word : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                            "0123456789-_./:=,+@%") == std::string::npos;
    if (plain) {
      line += word;
      continue;
    }
    line += '\'';
    for (const char ch : word) line += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    line += '\'';
  }
  return line;
}

void exec_launch(const LaunchCommand& command) {
  std::vector<char*> args;
  for (const std::string& word : command.argv) args.push_back(const_cast<char*>(word.c_str()));
  args.push_back(nullptr);
  std::cout << "echelon launch: " << shell_quoted(command.argv) << std::endl;
  execvp(args[0], args.data());
  ECH_FAIL("launch: cannot start '", command.argv[0], "': ", std::strerror(errno),
           " (install openmpi-bin, or name the launcher with --mpirun)");
}

}  // namespace echelon::app
