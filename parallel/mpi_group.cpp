// The MPI process group (process_group.h); its transport is in mpi_transport.cpp. Every blocking
// wait polls (MPI_Test with a short back-off, mpi_transport.h) instead of blocking inside MPI.
#include <echelon/parallel/process_group.h>

#include <unistd.h>

#include <cstdlib>

#include <echelon/base/error.h>
#include <echelon/parallel/rendezvous.h>

#if ECHELON_WITH_MPI
#include <mpi.h>

#include <echelon/parallel/mpi_transport.h>
#include <echelon/parallel/rendezvous_mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include <echelon/autograd/grad_mode.h>
#include <echelon/tensor/ops.h>
#endif

#if ECHELON_WITH_MPI && ECHELON_WITH_NCCL
#include <echelon/parallel/nccl_comm.h>
#endif
#if ECHELON_WITH_MPI && ECHELON_WITH_NCCL && ECHELON_CUDA_SIM
#include <echelon/cuda/sim/nccl_bootstrap.h>
#endif

namespace echelon::parallel {

namespace {

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

}  // namespace

#if ECHELON_WITH_MPI

namespace {
// Set once processes met through a rendezvous: its watchdog thread (parallel/rendezvous.cpp) sees
// a peer's process end and stops this one with an error naming the rank. MPI errors return to
// the caller in such a world (MPI_ERRORS_RETURN) and wait for that verdict first: MPI, noticing
// the same death in a send, would otherwise often win the race with a message naming no rank.
std::atomic<bool> g_peers_watched{false};
}  // namespace

void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  if (g_peers_watched.load()) std::this_thread::sleep_for(std::chrono::seconds(2));
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  ECH_FAIL("MPI ", what, " failed: ", std::string(text, static_cast<size_t>(length)));
}

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::BFloat16:  // MPI has no bfloat16: its bits travel; a sum refuses it (below)
      return MPI_UINT16_T;
  }
  ECH_FAIL("MPI: unknown dtype");
}

class MpiGroup final : public ProcessGroup, public std::enable_shared_from_this<MpiGroup> {
 public:
  // `parent`: the group this one was split from (kept alive: MPI is finalised with the world).
  // `rendezvous`: the world of processes that met through it (torchrun-style), not mpirun's.
  MpiGroup(MPI_Comm comm, std::shared_ptr<MpiGroup> parent, bool finalize,
           std::unique_ptr<Rendezvous> rendezvous = nullptr)
      : comm_(comm),
        parent_(std::move(parent)),
        finalize_(finalize),
        rendezvous_(std::move(rendezvous)) {
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    // Separate communicators: the executor's point-to-point traffic, the driver's control
    // messages and the collectives never match each other's messages.
    check_mpi(MPI_Comm_dup(comm_, &p2p_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(comm_, &control_), "MPI_Comm_dup");
    check_mpi(MPI_Comm_dup(comm_, &collective_), "MPI_Comm_dup");
  }
  ~MpiGroup() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  std::string host() const override {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    return name;
  }

  std::unique_ptr<Transport> make_transport(int peer, int tag, Device local,
                                            size_t capacity) override {
    ECH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "MPI transport: rank ", rank_,
              " cannot connect to rank ", peer, " of ", size_);
    return make_mpi_transport(p2p_, peer, tag, local, capacity, nccl_link(peer, local));
  }

  void all_reduce_sum(std::vector<Tensor>& tensors) override;
  std::unique_ptr<PendingSum> start_all_reduce_sum(const Tensor& flat) override;
  void broadcast(Tensor& tensor, int root) override {
    ECH_CHECK(tensor.device().is_cpu() && tensor.is_contiguous(),
              "MPI broadcast: needs a contiguous ", "CPU tensor");
    // Non-blocking, waited for with the back-off: the blocking call spins on a core for as long
    // as the root is late (at every epoch's end a later partition waits for partition 0's last
    // backward), and on a machine with fewer cores than ranks that core is a partition's.
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibcast(tensor.raw_data(), count_of(tensor.nbytes()), MPI_BYTE, root, collective_,
                         &request),
              "MPI_Ibcast");
    wait_for(request, nullptr);
  }
  // Likewise: the ranks reach the barrier after each evaluation, rank 0 last (it also writes the
  // checkpoint).
  void barrier() override {
    MPI_Request request = MPI_REQUEST_NULL;
    check_mpi(MPI_Ibarrier(collective_, &request), "MPI_Ibarrier");
    wait_for(request, nullptr);
  }
  void send_bytes(const std::vector<uint8_t>& bytes, int dest, int tag) override;
  std::pair<int, std::vector<uint8_t>> recv_bytes(int tag) override;
  std::optional<std::pair<int, std::vector<uint8_t>>> try_recv_bytes(int tag) override;
  std::shared_ptr<ProcessGroup> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_shared<MpiGroup>(sub, shared_from_this(), false);
  }
  [[noreturn]] void abort(int code) override {
    const MpiGroup* world = this;
    while (world->parent_) world = world->parent_.get();
    if (world->rendezvous_) {
      // No launcher can end the other processes: they notice this one's closed rendezvous
      // socket (rendezvous.h) and end naming this rank.
      world->rendezvous_->abandon();
      std::_Exit(code);
    }
    MPI_Abort(world->comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

 private:
  void reap_control(bool wait);
  // A GPU partition's bytes go device to device over NCCL when the build has it (the pair's
  // communicator is made here, collectively with the peer's matching make_transport).
  std::unique_ptr<NcclLink> nccl_link([[maybe_unused]] int peer, [[maybe_unused]] Device local) {
#if ECHELON_WITH_NCCL
    if (!local.is_cuda()) return nullptr;
    constexpr int kIdTag = 99;
    const int pair_rank = rank_ < peer ? 0 : 1;
    return std::make_unique<NcclLink>(
        1 - pair_rank, local.index, [&](NcclCommunicator::UniqueId& id) {
          if (pair_rank == 0) {
            check_mpi(
                MPI_Send(id.data(), static_cast<int>(id.size()), MPI_BYTE, peer, kIdTag, control_),
                "MPI_Send");
          } else {
            check_mpi(MPI_Recv(id.data(), static_cast<int>(id.size()), MPI_BYTE, peer, kIdTag,
                               control_, MPI_STATUS_IGNORE),
                      "MPI_Recv");
          }
        });
#else
    return nullptr;
#endif
  }
  void all_reduce_on_host(std::vector<Tensor>& tensors);

  MPI_Comm comm_, p2p_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL, collective_ = MPI_COMM_NULL;
  std::shared_ptr<MpiGroup> parent_;
  bool finalize_;
  std::unique_ptr<Rendezvous> rendezvous_;
  int rank_ = 0, size_ = 1;
  struct ControlSend {
    std::vector<uint8_t> bytes;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::deque<std::unique_ptr<ControlSend>> control_sends_;
#if ECHELON_WITH_NCCL
  std::unique_ptr<NcclCommunicator> nccl_;  // the group's, for GPU all-reduces (made lazily)
#endif
};

MpiGroup::~MpiGroup() {
  reap_control(/*wait=*/true);
  for (MPI_Comm* comm : {&p2p_, &control_, &collective_}) MPI_Comm_free(comm);
  if (parent_) MPI_Comm_free(&comm_);
  // Not MPI_Comm_disconnect: between singletons its PMIx fence never completes (Open MPI 4.1).
  if (rendezvous_) MPI_Comm_free(&comm_);
  if (finalize_) MPI_Finalize();
  if (rendezvous_) rendezvous_->finish();
}

void MpiGroup::all_reduce_sum(std::vector<Tensor>& tensors) {
  const bool on_gpu = std::any_of(tensors.begin(), tensors.end(),
                                  [](const Tensor& t) { return t.defined() && t.is_cuda(); });
  if (!on_gpu) {
    all_reduce_on_host(tensors);
    return;
  }
#if ECHELON_WITH_NCCL
  const int device = tensors.front().device().index;
  if (!nccl_) {
    nccl_ = std::make_unique<NcclCommunicator>(
        size_, rank_, device, [this](NcclCommunicator::UniqueId& id) {
          check_mpi(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, collective_),
                    "MPI_Bcast");
        });
  }
  ECH_CHECK(nccl_->device() == device,
            "NCCL all-reduce: the group's communicator is on cuda:", nccl_->device(),
            ", the gradients on cuda:", device);
  nccl_->all_reduce_sum(tensors);
#else
  // Without NCCL: through host copies.
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (const Tensor& t : tensors) host.push_back(t.to(Device::cpu()).contiguous());
  all_reduce_on_host(host);
  NoGradGuard no_grad;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor target = tensors[i].detach();
    ops::copy_(target, host[i].to(tensors[i].device()));
  }
#endif
}

// One MPI_Iallreduce in flight. Waiting polls like every wait here: the other threads' MPI calls
// and these tests drive Open MPI's progress of the collective.
class MpiPendingSum final : public ProcessGroup::PendingSum {
 public:
  MpiPendingSum(const Tensor& flat, MPI_Comm comm) : flat_(std::make_unique<Tensor>(flat)) {
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, flat.raw_data(), count_of(flat.numel()),
                             mpi_type(flat.dtype()), MPI_SUM, comm, &request_),
              "MPI_Iallreduce");
  }
  ~MpiPendingSum() override {
    // Only after a failure (the process is about to abort) is a sum still running: a collective's
    // request cannot be freed or cancelled, and MPI may still write the buffer, so both stay.
    if (request_ != MPI_REQUEST_NULL) (void)flat_.release();
  }
  MpiPendingSum(const MpiPendingSum&) = delete;
  MpiPendingSum& operator=(const MpiPendingSum&) = delete;

  void wait() override {
    if (request_ != MPI_REQUEST_NULL) wait_for(request_, nullptr);
  }

 private:
  std::unique_ptr<Tensor> flat_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

std::unique_ptr<ProcessGroup::PendingSum> MpiGroup::start_all_reduce_sum(const Tensor& flat) {
  ECH_CHECK(flat.device().is_cpu() && flat.is_contiguous() &&
                (flat.dtype() == kFloat32 || flat.dtype() == kFloat64),
            "MPI all-reduce: needs a contiguous float32/float64 CPU tensor, got ", flat.describe());
  return std::make_unique<MpiPendingSum>(flat, collective_);
}

void MpiGroup::all_reduce_on_host(std::vector<Tensor>& tensors) {
  // One bucket per call when every tensor is float32 (the usual case): one MPI call, not one per
  // parameter. The sum order is MPI's and the same on every process.
  const bool one_bucket = std::all_of(tensors.begin(), tensors.end(), [](const Tensor& t) {
    return t.device().is_cpu() && t.is_contiguous() && t.dtype() == kFloat32;
  });
  if (!one_bucket) {
    for (Tensor& t : tensors) {
      ECH_CHECK(t.device().is_cpu() && t.is_contiguous(),
                "MPI all-reduce: needs contiguous CPU tensors");
      ECH_CHECK(t.dtype() != kBFloat16,
                "MPI all-reduce: MPI cannot sum bfloat16; cast to float32 first, got ",
                t.describe());
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), count_of(t.numel()), mpi_type(t.dtype()),
                              MPI_SUM, collective_),
                "MPI_Allreduce");
    }
    return;
  }
  size_t total = 0;
  for (const Tensor& t : tensors) total += static_cast<size_t>(t.numel());
  std::vector<float> bucket(total);
  size_t offset = 0;
  for (const Tensor& t : tensors) {
    std::memcpy(bucket.data() + offset, t.raw_data(), t.nbytes());
    offset += static_cast<size_t>(t.numel());
  }
  check_mpi(
      MPI_Allreduce(MPI_IN_PLACE, bucket.data(), count_of(total), MPI_FLOAT, MPI_SUM, collective_),
      "MPI_Allreduce");
  offset = 0;
  for (Tensor& t : tensors) {
    std::memcpy(t.raw_data(), bucket.data() + offset, t.nbytes());
    offset += static_cast<size_t>(t.numel());
  }
}

void MpiGroup::reap_control(bool wait) {
  while (!control_sends_.empty()) {
    MPI_Request& request = control_sends_.front()->request;
    if (wait) {
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    } else {
      int done = 0;
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) return;
    }
    control_sends_.pop_front();
  }
}

void MpiGroup::send_bytes(const std::vector<uint8_t>& bytes, int dest, int tag) {
  reap_control(false);
  auto send = std::make_unique<ControlSend>();
  send->bytes = bytes;
  check_mpi(MPI_Isend(send->bytes.data(), count_of(send->bytes.size()), MPI_BYTE, dest, tag,
                      control_, &send->request),
            "MPI_Isend");
  control_sends_.push_back(std::move(send));
}

std::optional<std::pair<int, std::vector<uint8_t>>> MpiGroup::try_recv_bytes(int tag) {
  reap_control(false);
  int arrived = 0;
  MPI_Message handle;
  MPI_Status status;
  check_mpi(MPI_Improbe(MPI_ANY_SOURCE, tag, control_, &arrived, &handle, &status), "MPI_Improbe");
  if (!arrived) return std::nullopt;
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<uint8_t> bytes(static_cast<size_t>(count));
  check_mpi(MPI_Mrecv(bytes.data(), count, MPI_BYTE, &handle, MPI_STATUS_IGNORE), "MPI_Mrecv");
  return std::make_pair(status.MPI_SOURCE, std::move(bytes));
}

std::pair<int, std::vector<uint8_t>> MpiGroup::recv_bytes(int tag) {
  Backoff backoff;
  for (;;) {
    if (auto received = try_recv_bytes(tag)) return std::move(*received);
    backoff.pause();
  }
}

void init_mpi() {
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init");
  ECH_CHECK(provided >= MPI_THREAD_MULTIPLE, "MPI: the library does not provide ",
            "MPI_THREAD_MULTIPLE (got level ", provided, ")");
}

}  // namespace

bool process_groups_available() {
  return true;
}

std::shared_ptr<ProcessGroup> world_process_group() {
  static std::weak_ptr<ProcessGroup> world;
  if (auto existing = world.lock()) return existing;
  int finalized = 0;
  MPI_Finalized(&finalized);
  ECH_CHECK(!finalized, "MPI: the world group was already closed in this process");
  int initialized = 0;
  MPI_Initialized(&initialized);
  std::shared_ptr<MpiGroup> group;
  if (launched_by_mpirun()) {
    if (!initialized) init_mpi();
    group = std::make_shared<MpiGroup>(MPI_COMM_WORLD, nullptr, !initialized);
  } else {
    const std::optional<RendezvousEnvironment> env = rendezvous_environment();
    if (!env) return nullptr;
    ECH_CHECK(!initialized, "rendezvous: MPI was initialised before the processes met");
    // Before MPI_Init: Open MPI reads ompi-server's address from the environment.
    auto rendezvous = std::make_unique<Rendezvous>(*env);
    init_mpi();
    const MPI_Comm joined = join_rendezvous_world(*rendezvous);
    // Inherited by the group's duplicates and splits.
    check_mpi(MPI_Comm_set_errhandler(joined, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    g_peers_watched.store(true);
#if ECHELON_WITH_NCCL && ECHELON_CUDA_SIM
    cudasim::set_nccl_bootstrap(
        joined);  // the emulated NCCL's processes are these, not MPI's world
#endif
    group = std::make_shared<MpiGroup>(joined, nullptr, true, std::move(rendezvous));
  }
  if (group->size() == 1) return nullptr;  // one process: threads, as without a launcher
  world = group;
  return group;
}

#else  // no MPI in this build

bool process_groups_available() {
  return false;
}

std::shared_ptr<ProcessGroup> world_process_group() {
  ECH_CHECK(!launched_by_mpirun(), "this process was started by mpirun, but this echelon was ",
            "built without MPI: install libopenmpi-dev and reconfigure (-DECHELON_MPI=ON)");
  ECH_CHECK(
      !rendezvous_environment(), "RANK and WORLD_SIZE are set, but this echelon was built ",
      "without MPI: install openmpi-bin and libopenmpi-dev and reconfigure (-DECHELON_MPI=ON)");
  return nullptr;
}

#endif

}  // namespace echelon::parallel
