// torchrun-style rendezvous (rendezvous.h): the socket handshake, ompi-server and the liveness
// watch. Lines of text only; MPI itself is set up in mpi_group.cpp.
#include <echelon/parallel/rendezvous.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include <echelon/base/env.h>
#include <echelon/base/error.h>

extern char** environ;

namespace echelon::parallel {

namespace {

using Clock = std::chrono::steady_clock;

// A count or a rank (below 2^24), or a TCP port.
int parse_variable(const char* name, const char* text, int low, int high = 1 << 24) {
  return static_cast<int>(env::parse_integer(name, text, low, high));
}

std::string required(const char* name, int rank) {
  const char* value = std::getenv(name);
  ECH_CHECK(value != nullptr && *value != '\0', "rendezvous: RANK=", rank, " is set but ", name,
            " is not: set MASTER_ADDR and MASTER_PORT to rank 0's host and a free port (or start ",
            "the run with `echelon launch --rdzv env` or mpirun)");
  return value;
}

Clock::time_point seconds_from_now(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

// Appends what `fd` has to `buffer`: false at end of file (or a reset connection).
bool read_some(int fd, std::string& buffer) {
  char chunk[4096];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got > 0) {
      buffer.append(chunk, static_cast<size_t>(got));
      return true;
    }
    if (got < 0 && errno == EINTR) continue;
    return false;
  }
}

// The first whole line of `buffer`, removed from it.
std::optional<std::string> take_line(std::string& buffer) {
  const size_t end = buffer.find('\n');
  if (end == std::string::npos) return std::nullopt;
  std::string line = buffer.substr(0, end);
  buffer.erase(0, end + 1);
  return line;
}

// Waits for one line from `fd` until `deadline`: nullopt when the peer closed, throws `late`
// on timeout.
std::optional<std::string> read_line(int fd, std::string& buffer, Clock::time_point deadline,
                                     const std::string& late) {
  for (;;) {
    if (auto line = take_line(buffer)) return line;
    pollfd entry{fd, POLLIN, 0};
    const int ready = ::poll(&entry, 1, milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    ECH_CHECK(ready > 0, late);
    if (!read_some(fd, buffer)) return std::nullopt;
  }
}

void write_all(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    // MSG_NOSIGNAL: a peer that has gone is reported by the watch, not by SIGPIPE.
    const ssize_t n = ::send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string where(const RendezvousEnvironment& env) {
  return str(env.port_name, " = ", env.master_addr, ":", env.master_port);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<RendezvousEnvironment> rendezvous_environment() {
  const char* rank_text = std::getenv("RANK");
  const char* world_text = std::getenv("WORLD_SIZE");
  if (rank_text == nullptr && world_text == nullptr) return std::nullopt;
  // One without the other is a launch mistake (torchrun sets both): this process would
  // otherwise train alone, silently, while its peers wait for it.
  ECH_CHECK(world_text != nullptr, "rendezvous: RANK=", rank_text,
            " is set but WORLD_SIZE is not; set both (as torchrun does) or neither");
  RendezvousEnvironment env;
  env.world_size = parse_variable("WORLD_SIZE", world_text, 1);
  ECH_CHECK(rank_text != nullptr || env.world_size == 1, "rendezvous: WORLD_SIZE=", env.world_size,
            " is set but RANK is not; set both (as torchrun does) or neither");
  if (rank_text == nullptr) return std::nullopt;  // WORLD_SIZE=1 alone: one process
  env.rank = parse_variable("RANK", rank_text, 0);
  if (env.world_size == 1) return std::nullopt;  // one process: nothing to join
  ECH_CHECK(env.rank < env.world_size, "rendezvous: RANK=", env.rank,
            " is not below WORLD_SIZE=", env.world_size);
  const char* local = std::getenv("LOCAL_RANK");
  env.local_rank = local != nullptr ? parse_variable("LOCAL_RANK", local, 0) : 0;
  env.master_addr = required("MASTER_ADDR", env.rank);
  env.master_port =
      parse_variable("MASTER_PORT", required("MASTER_PORT", env.rank).c_str(), 1, 65535);
  env.port_name = "MASTER_ADDR:MASTER_PORT";
  const char* own_port = std::getenv("ECHELON_RENDEZVOUS_PORT");
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (own_port != nullptr) {
    env.master_port = parse_variable("ECHELON_RENDEZVOUS_PORT", own_port, 1, 65535);
    env.port_name = "MASTER_ADDR:ECHELON_RENDEZVOUS_PORT";
  } else if (agent_store != nullptr && std::string(agent_store) == "True" &&
             env.master_port < 65535) {
    // torchrun's agent serves its own store on MASTER_PORT: take the next port.
    env.master_port += 1;
    env.port_name = "MASTER_ADDR:MASTER_PORT+1";
  }
  if (const char* timeout = std::getenv("ECHELON_RENDEZVOUS_TIMEOUT")) {
    char* end = nullptr;
    env.timeout_s = std::strtod(timeout, &end);
    ECH_CHECK(end != timeout && *end == '\0' && env.timeout_s > 0 && env.timeout_s <= 86400,
              "ECHELON_RENDEZVOUS_TIMEOUT='", timeout, "' must be seconds in (0, 86400]");
  }
  return env;
}

Rendezvous::Rendezvous(const RendezvousEnvironment& environment) : env_(environment) {
  // Open MPI's TCP transport writing to a peer that was killed must not end this process by
  // SIGPIPE before the liveness watch has named that peer (under mpirun, mpirun does the naming).
  std::signal(SIGPIPE, SIG_IGN);
  if (env_.rank != 0) {
    connect_to_master();
    return;
  }
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ECH_CHECK(listener >= 0, "rendezvous: socket(): ", std::strerror(errno));
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);  // every interface, as torch's TCPStore
  address.sin_port = htons(static_cast<uint16_t>(env_.master_port));
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listener, 128) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listener);
    ECH_FAIL("rendezvous: RANK=0 cannot listen on port ", env_.master_port, " (", env_.port_name,
             "): ", why, " (is another run using this port? pick another MASTER_PORT)");
  }
  try {
    start_ompi_server();
    gather_ranks(listener);
  } catch (...) {
    // A throwing constructor runs no destructor: the server, its folder and the sockets go here.
    ::close(listener);
    release();
    throw;
  }
  ::close(listener);
}

Rendezvous::~Rendezvous() {
  if (watcher_.joinable()) {
    stop_watch();
  }
  for (int& fd : stop_pipe_)
    if (fd >= 0) ::close(std::exchange(fd, -1));
  release();
}

void Rendezvous::release() {
  for (Peer& peer : peers_)
    if (peer.fd >= 0) ::close(std::exchange(peer.fd, -1));
  stop_ompi_server();
  if (!server_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(server_dir_, ignored);
    server_dir_.clear();
  }
}

void Rendezvous::start_ompi_server() {
  char pattern[] = "/tmp/echelon-rdzv-XXXXXX";
  ECH_CHECK(::mkdtemp(pattern) != nullptr,
            "rendezvous: cannot make a folder in /tmp: ", std::strerror(errno));
  server_dir_ = pattern;
  const std::string uri_file = server_dir_ + "/uri", log_file = server_dir_ + "/ompi-server.log";
  // Everything the child needs is built before fork: after it only async-signal-safe calls.
  std::vector<std::string> args{"ompi-server", "--no-daemonize", "--report-uri", uri_file};
  std::vector<std::string> env_words;
  for (char** entry = environ; *entry != nullptr; ++entry) env_words.emplace_back(*entry);
  // Containers often run as root, which Open MPI refuses unless told.
  env_words.insert(env_words.end(),
                   {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"});
  std::vector<char*> argv, envp;
  for (std::string& word : args) argv.push_back(word.data());
  for (std::string& word : env_words) envp.push_back(word.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  ECH_CHECK(child >= 0, "rendezvous: fork(): ", std::strerror(errno));
  if (child == 0) {
    // The server ends with this process, even when it is killed.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(1);
    const int log = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ompi_server_ = child;
}

void Rendezvous::stop_ompi_server() {
  if (ompi_server_ < 0) return;
  ::kill(ompi_server_, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (::waitpid(ompi_server_, nullptr, WNOHANG) != 0) {
      ompi_server_ = -1;
      return;
    }
    ::usleep(20000);
  }
  ::kill(ompi_server_, SIGKILL);
  ::waitpid(ompi_server_, nullptr, 0);
  ompi_server_ = -1;
}

void Rendezvous::gather_ranks(int listener) {
  const auto deadline = seconds_from_now(env_.timeout_s);
  const std::string late_note = str(" (ECHELON_RENDEZVOUS_TIMEOUT=", env_.timeout_s, " s)");
  std::vector<Peer> pending;  // connected, RANK not said yet
  peers_.resize(static_cast<size_t>(env_.world_size - 1));
  int arrived = 0;
  // Every connected process hears why the run cannot start; then rank 0 throws the same.
  auto refuse = [&](const std::string& why) {
    for (std::vector<Peer>* group : {&peers_, &pending})
      for (Peer& peer : *group)
        if (peer.fd >= 0) write_all(peer.fd, "error " + why + "\n");
    for (Peer& peer : pending) ::close(peer.fd);
    ECH_FAIL(why);
  };
  while (arrived < env_.world_size - 1) {
    std::vector<pollfd> entries{{listener, POLLIN, 0}};
    for (const Peer& peer : pending) entries.push_back({peer.fd, POLLIN, 0});
    const int ready = ::poll(entries.data(), entries.size(), milliseconds_until(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      std::string missing;
      for (int rank = 1; rank < env_.world_size; ++rank)
        if (peers_[static_cast<size_t>(rank - 1)].fd < 0)
          missing += (missing.empty() ? "" : ", ") + std::to_string(rank);
      refuse(str("rendezvous: rank 0 waited at ", where(env_), " for WORLD_SIZE=", env_.world_size,
                 " processes, but RANK ", missing, " never connected", late_note));
    }
    if (entries[0].revents & POLLIN) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) pending.push_back(Peer{fd, -1, {}, false});
    }
    for (size_t i = pending.size(); i-- > 0;) {
      if (!(entries.size() > i + 1 && entries[i + 1].revents)) continue;
      Peer& peer = pending[i];
      const bool open = read_some(peer.fd, peer.buffer);
      const std::optional<std::string> line = take_line(peer.buffer);
      if (!line) {
        if (!open) {
          ::close(peer.fd);
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        }
        continue;
      }
      int rank = -1, world = -1;
      if (std::sscanf(line->c_str(), "hello %d %d", &rank, &world) != 2) {
        ::close(peer.fd);  // not one of ours (a port scan, a stray client)
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      if (world != env_.world_size)
        refuse(str("rendezvous: RANK=", rank, " says WORLD_SIZE=", world, " but rank 0 has ",
                   "WORLD_SIZE=", env_.world_size, ": every process needs the same WORLD_SIZE"));
      if (rank <= 0 || rank >= env_.world_size) {
        write_all(peer.fd,
                  str("error rendezvous: rank 0 at ", where(env_), " refuses RANK=", rank, ": ",
                      rank == 0 ? "rank 0 is taken"
                                : "not below WORLD_SIZE=" + std::to_string(env_.world_size),
                      "\n"));
        refuse(str("rendezvous: a process with RANK=", rank, " connected; ",
                   rank == 0 ? "two processes have RANK=0"
                             : "RANK must be below WORLD_SIZE=" + std::to_string(env_.world_size)));
      }
      Peer& slot = peers_[static_cast<size_t>(rank - 1)];
      if (slot.fd >= 0)
        refuse(str("rendezvous: two processes have RANK=", rank, ": every RANK in [0, ",
                   env_.world_size, ") must be given once"));
      slot = std::move(peer);
      slot.rank = rank;
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      ++arrived;
    }
  }
  for (Peer& peer : pending) ::close(peer.fd);

  // Every rank is here: hand them ompi-server's address.
  std::string uri;
  const std::string uri_file = server_dir_ + "/uri";
  for (;;) {
    uri = read_file(uri_file);
    if (uri.find('\n') != std::string::npos) break;  // written in full
    int status = 0;
    if (::waitpid(ompi_server_, &status, WNOHANG) == ompi_server_) {
      ompi_server_ = -1;
      refuse(WIFEXITED(status) && WEXITSTATUS(status) == 127
                 ? std::string("rendezvous: rank 0 cannot start ompi-server: it is not on PATH "
                               "(Debian: apt-get install openmpi-bin)")
                 : "rendezvous: ompi-server ended at start: " +
                       read_file(server_dir_ + "/ompi-server.log"));
    }
    if (Clock::now() > deadline + std::chrono::seconds(30))
      refuse("rendezvous: ompi-server did not report its address within 30 s");
    ::usleep(20000);
  }
  uri.erase(uri.find('\n'));
  ::setenv("OMPI_MCA_pmix_server_uri", uri.c_str(), 1);
  for (Peer& peer : peers_) send_line(peer, "uri " + uri);
}

void Rendezvous::connect_to_master() {
  const auto deadline = seconds_from_now(env_.timeout_s);
  const std::string me = str("rendezvous: RANK=", env_.rank);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env_.master_port);
  const int looked_up = ::getaddrinfo(env_.master_addr.c_str(), port.c_str(), &hints, &found);
  ECH_CHECK(looked_up == 0, me, ": MASTER_ADDR=", env_.master_addr,
            " is not a host this machine can resolve: ", ::gai_strerror(looked_up));
  std::string last_error;
  int fd = -1;
  while (fd < 0) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, found->ai_addr, found->ai_addrlen) == 0) break;
    last_error = std::strerror(errno);
    ::close(fd);
    fd = -1;
    if (Clock::now() > deadline) {
      ::freeaddrinfo(found);
      ECH_FAIL(me, " could not reach rank 0 at ", where(env_), " within ", env_.timeout_s,
               " s (ECHELON_RENDEZVOUS_TIMEOUT): ", last_error,
               "; is rank 0 running, with the same MASTER_ADDR and MASTER_PORT?");
    }
    ::usleep(100000);
  }
  ::freeaddrinfo(found);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  peers_.push_back(Peer{fd, 0, {}, false});
  send_line(peers_[0], str("hello ", env_.rank, " ", env_.world_size));
  // Rank 0 may wait up to its own timeout for a late rank, and then answers either way.
  const auto answer_deadline = seconds_from_now(env_.timeout_s + 30);
  const std::optional<std::string> line =
      read_line(fd, peers_[0].buffer, answer_deadline,
                str(me, ": rank 0 at ", where(env_), " did not answer in time"));
  ECH_CHECK(line.has_value(), me, ": rank 0 at ", where(env_),
            " closed the rendezvous connection before the run started");
  ECH_CHECK(line->rfind("error ", 0) != 0, line->substr(6), " (", me, ")");
  ECH_CHECK(line->rfind("uri ", 0) == 0, me, ": rank 0 at ", where(env_), " answered '", *line,
            "', not an echelon rendezvous");
  ::setenv("OMPI_MCA_pmix_server_uri", line->substr(4).c_str(), 1);
}

void Rendezvous::send_line(Peer& peer, const std::string& line) {
  std::lock_guard<std::mutex> lock(send_mutex_);
  if (peer.fd >= 0) write_all(peer.fd, line + "\n");
}

void Rendezvous::send_port(int rank, const std::string& port) {
  send_line(peers_.at(static_cast<size_t>(rank - 1)), "port " + port);
}

std::string Rendezvous::receive_port() {
  const auto deadline = seconds_from_now(env_.timeout_s);
  const std::string me = str("rendezvous: RANK=", env_.rank);
  const std::optional<std::string> line =
      read_line(peers_[0].fd, peers_[0].buffer, deadline,
                str(me, ": rank 0 sent no MPI port within ", env_.timeout_s, " s"));
  ECH_CHECK(line.has_value(), me, ": rank 0's process ended while the ranks joined");
  ECH_CHECK(line->rfind("port ", 0) == 0, me, ": expected an MPI port from rank 0, got '", *line,
            "'");
  return line->substr(5);
}

void Rendezvous::watch() {
  ECH_CHECK(::pipe2(stop_pipe_, O_CLOEXEC) == 0, "rendezvous: pipe(): ", std::strerror(errno));
  watcher_ = std::thread([this] { watch_loop(); });
}

void Rendezvous::watch_loop() {
  for (;;) {
    std::vector<pollfd> entries{{stop_pipe_[0], POLLIN, 0}};
    std::vector<Peer*> watched;
    for (Peer& peer : peers_) {
      if (peer.fd < 0 || peer.finished) continue;
      entries.push_back({peer.fd, POLLIN, 0});
      watched.push_back(&peer);
    }
    if (::poll(entries.data(), entries.size(), -1) < 0) continue;  // EINTR
    if (entries[0].revents) return;
    for (size_t i = 0; i < watched.size(); ++i) {
      if (!entries[i + 1].revents) continue;
      Peer& peer = *watched[i];
      const bool open = read_some(peer.fd, peer.buffer);
      while (const std::optional<std::string> line = take_line(peer.buffer)) {
        if (*line == "bye") {
          peer.finished = true;
          ++finished_peers_;
        } else if (line->rfind("abort ", 0) == 0) {
          fail_run(line->substr(6));
        }
      }
      if (open || peer.finished) continue;
      if (finishing_ && env_.rank == 0) {  // gone after the run: as good as a goodbye
        peer.finished = true;
        ++finished_peers_;
        continue;
      }
      fail_run(str("rank ", peer.rank, "'s process ended before the run finished (killed, ",
                   "crashed or failed: see its output)"));
    }
  }
}

void Rendezvous::stop_watch() {
  const char byte = 'x';
  while (::write(stop_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  watcher_.join();
}

void Rendezvous::fail_run(const std::string& why) {
  if (env_.rank == 0) {
    for (Peer& peer : peers_)
      if (!peer.finished) send_line(peer, "abort " + why);
    stop_ompi_server();
    std::error_code ignored;  // _Exit below runs no destructor
    std::filesystem::remove_all(server_dir_, ignored);
  }
  std::cout.flush();
  std::cerr << "echelon: error: rank " << env_.rank << " of " << env_.world_size << ": " << why
            << std::endl;
  std::_Exit(1);  // the main thread may be blocked inside MPI waiting for the process that is gone
}

void Rendezvous::finish() {
  finishing_ = true;
  if (env_.rank != 0) {
    if (watcher_.joinable()) stop_watch();
    send_line(peers_[0], "bye");
    return;
  }
  for (Peer& peer : peers_) send_line(peer, "bye");
  const auto deadline = seconds_from_now(env_.timeout_s);
  while (watcher_.joinable() && finished_peers_ < env_.world_size - 1 && Clock::now() < deadline)
    ::usleep(10000);
  if (watcher_.joinable()) stop_watch();
  stop_ompi_server();
}

void Rendezvous::abandon() {
  stop_ompi_server();
}

}  // namespace echelon::parallel
