// `echelon launch`: the train command's process count -> one mpirun command line (launch_cmd.h).
#include <echelon/app/cli/launch_cmd.h>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
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
  launch
      ->add_option("--rdzv", command.rendezvous,
                   "How the processes meet: mpirun (default), or env: start this node's ranks "
                   "here with torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT variables")
      ->check(CLI::IsMember({"mpirun", "env"}));
  launch->add_option("--node-rank", command.node_rank, "--rdzv env: this node's index (0 first)");
  launch->add_option("--master-addr", command.master_addr,
                     "--rdzv env: the host of rank 0 (default 127.0.0.1)");
  launch->add_option("--master-port", command.master_port,
                     "--rdzv env: a free TCP port on rank 0's host (default 29500)");
  launch->footer(
      "The words after -- are the run every rank starts, e.g.\n"
      "  echelon launch -- train --model resnet20 --pipeline 2 --data-parallel 2   (4 processes)\n"
      "  echelon launch --rdzv env -- train --pipeline 2   (2 processes, torchrun-style)");
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
  const bool by_env = c.rendezvous == "env";
  ECH_CHECK(c.nnodes == 1 || by_env || !c.hostfile.empty(), "--nnodes ", c.nnodes,
            " needs --hostfile naming the nodes (or --rdzv env --node-rank I --master-addr HOST)");
  ECH_CHECK(!by_env || c.hostfile.empty(), "--hostfile is for mpirun; with --rdzv env run launch ",
            "on every node with --node-rank and --master-addr");
  ECH_CHECK(c.node_rank >= 0 && c.node_rank < c.nnodes, "--node-rank ", c.node_rank,
            " must be in [0, --nnodes ", c.nnodes, ")");
  ECH_CHECK(c.master_port >= 1 && c.master_port <= 65535, "--master-port ", c.master_port,
            " is not a TCP port");
  ECH_CHECK(c.hostfile.empty() || std::filesystem::is_regular_file(c.hostfile), "--hostfile '",
            c.hostfile, "' is not a file");

  // A launch flag after `--` reaches train, which names it "not expected" among its own words.
  for (const std::string& word : rank_command) {
    const std::string name = word.substr(0, word.find('='));
    if (name.rfind("--", 0) == 0 && name != "--help" && c.launch->get_option_no_throw(name))
      ECH_FAIL("launch: ", name, " is a flag of launch, not of train: put it before --, e.g. ",
               "echelon launch ", name, " ... -- train ...");
  }
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
  c.world_size = needed;
  if (by_env) {
    c.argv = {self};
    c.argv.insert(c.argv.end(), rank_command.begin(), rank_command.end());
    return;
  }

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

std::vector<std::string> rank_environment(const LaunchCommand& c, int local) {
  const int nproc = c.world_size / c.nnodes;
  return {"RANK=" + std::to_string(c.node_rank * nproc + local),
          "LOCAL_RANK=" + std::to_string(local),
          "WORLD_SIZE=" + std::to_string(c.world_size),
          "LOCAL_WORLD_SIZE=" + std::to_string(nproc),
          "MASTER_ADDR=" + c.master_addr,
          "MASTER_PORT=" + std::to_string(c.master_port)};
}

namespace {

volatile std::sig_atomic_t interrupted_by = 0;

void on_launch_signal(int signal) {
  interrupted_by = signal;
}

// "exited with status 3" / "was killed by signal 9 (Killed)"
std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return str("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return str("exited with status ", WEXITSTATUS(status));
}

void write_line(const std::string& line) {
  std::cerr.flush();
  for (size_t done = 0; done < line.size();) {
    const ssize_t n = write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr is gone: nothing else to tell
    done += static_cast<size_t>(n);
  }
}

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int run_local_ranks(const LaunchCommand& c) {
  const int nproc = c.world_size / c.nnodes;
  std::cout << "echelon launch: " << nproc << " of " << c.world_size
            << " processes on this node, rendezvous at " << c.master_addr << ":" << c.master_port
            << ": " << shell_quoted(c.argv) << std::endl;
  struct sigaction action {};
  action.sa_handler = on_launch_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<pid_t> children(static_cast<size_t>(nproc), -1);
  std::vector<int> ranks(static_cast<size_t>(nproc));
  // Everything a child needs is built before fork: after it only async-signal-safe calls.
  std::vector<char*> argv;
  for (const std::string& word : c.argv) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  const pid_t launcher = getpid();
  for (int local = 0; local < nproc; ++local) {
    // This process's environment without the variables set here (getenv finds the first).
    std::vector<std::string> words = rank_environment(c, local);
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string word = *entry;
      const std::string name = word.substr(0, word.find('=') + 1);
      const bool replaced = std::any_of(words.begin(), words.end(), [&](const std::string& own) {
        return own.compare(0, name.size(), name) == 0;
      });
      if (!replaced) words.push_back(word);
    }
    std::vector<char*> envp;
    envp.reserve(words.size() + 1);
    for (std::string& word : words) envp.push_back(word.data());
    envp.push_back(nullptr);
    ranks[static_cast<size_t>(local)] = c.node_rank * nproc + local;
    const pid_t child = fork();
    ECH_CHECK(child >= 0, "launch: fork(): ", std::strerror(errno));
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);  // the ranks end with the launcher, even when it is killed
      if (getppid() != launcher) _exit(1);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    children[static_cast<size_t>(local)] = child;
  }

  // Waits for every rank. The first failure (or Ctrl-C) ends the others: SIGTERM, then SIGKILL
  // after a grace period, as torchrun's agent does; no rank waits for a partner that is gone.
  using Clock = std::chrono::steady_clock;
  int result = 0, running = nproc;
  std::optional<Clock::time_point> kill_at;
  const auto stop_others = [&](int signal) {
    for (const pid_t child : children)
      if (child > 0) kill(child, signal);
  };
  while (running > 0) {
    if (interrupted_by != 0 && !kill_at) {
      std::cerr << "echelon launch: interrupted, stopping every rank" << std::endl;
      result = 128 + interrupted_by;
      stop_others(SIGTERM);
      kill_at = Clock::now() + std::chrono::seconds(10);
    }
    if (kill_at && Clock::now() > *kill_at) {
      stop_others(SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }
    int status = 0;
    const pid_t ended = waitpid(-1, &status, WNOHANG);
    if (ended <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t i = 0; i < children.size(); ++i) {
      if (children[i] != ended) continue;
      children[i] = -1;
      --running;
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed || result != 0) break;
      // One write(2): the other ranks share this stderr, and std::cerr writes each piece on its
      // own, so their messages (Open MPI's about the lost peer) could land inside the line.
      write_line(str("echelon launch: rank ", ranks[i], " (pid ", ended, ") ",
                     describe_status(status), "; stopping the other ranks\n"));
      result = exit_code_of(status);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        std::cerr << "echelon launch: could not start " << c.argv[0] << std::endl;
      stop_others(SIGTERM);
      kill_at = Clock::now() + std::chrono::seconds(10);
    }
  }
  return result;
}

}  // namespace echelon::app
