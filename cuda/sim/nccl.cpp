// CUDA emulation: NCCL on MPI (cuda/sim/nccl.h). Why it is built this way:
// - an operation is a task on its stream's worker thread (runtime.cpp's enqueue), so it starts
//   only after the kernels queued before it and the host never waits for it, as on a GPU;
// - one group (or one ungrouped call) per stream is one task that posts every operation
//   non-blocking (MPI_Iallreduce, MPI_Isend, MPI_Irecv) and then polls them together: grouped
//   sends and receives between two ranks cannot deadlock, whatever their order;
// - each communicator is an MPI communicator of its own (MPI_Comm_create_group over the
//   bootstrap world), so its traffic never matches the MPI process group's messages;
// - the waits poll with a short back-off instead of blocking inside MPI, so a waiting stream
//   leaves the (possibly shared) cores to the others.
// MPI must provide MPI_THREAD_MULTIPLE (parallel/mpi_group.cpp asks for it): worker threads
// of several streams call MPI at once.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <echelon/cuda/sim/internal.h>
#include <echelon/cuda/sim/nccl.h>
#include <echelon/cuda/sim/nccl_bootstrap.h>

namespace {

using echelon::cudasim::detail::Where;

constexpr char kMagic[8] = "ech-sim";
constexpr int kTagBase = 20000, kTagRange = 10000;  // bootstrap tags, below MPI's minimum TAG_UB

// What a unique id holds: the root's rank in the bootstrap world and a number unique to it.
struct IdContents {
  char magic[8];
  int root;
  uint64_t sequence;
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES);

std::mutex g_bootstrap_mutex;
MPI_Comm g_bootstrap = MPI_COMM_WORLD;
std::atomic<uint64_t> g_sequence{0};

MPI_Comm bootstrap_world() {
  std::lock_guard lock(g_bootstrap_mutex);
  return g_bootstrap;
}

struct CommState {
  int nranks = 1, rank = 0, device = 0;
  MPI_Comm mpi = MPI_COMM_NULL;  // null for one rank
  std::mutex mutex;
  std::condition_variable idle;
  int64_t in_flight = 0;  // enqueued tasks using this communicator
};

struct Op {
  enum Kind { AllReduce, Send, Recv } kind = AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes = 0;
  int count = 0;  // elements (all-reduce)
  MPI_Datatype type = MPI_BYTE;
  MPI_Op op = MPI_SUM;
  int peer = 0;
  std::shared_ptr<CommState> comm;
  cudaStream_t stream = nullptr;
};

thread_local int t_group_depth = 0;
thread_local std::vector<Op> t_group;

ncclResult_t usage(ncclResult_t code, const std::string& why) {
  std::fprintf(stderr, "cudasim: NCCL: %s\n", why.c_str());
  return code;
}

ncclResult_t check(int mpi_code, const char* what) {
  if (mpi_code == MPI_SUCCESS) return ncclSuccess;
  return usage(ncclSystemError, std::string(what) + " failed");
}

size_t size_of(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
    case ncclFloat16:
    case ncclBfloat16:
      break;
  }
  return MPI_DATATYPE_NULL;  // no MPI arithmetic for half types
}

// Spins briefly, then sleeps up to 200 us (as parallel/mpi_group.cpp's waits).
void wait_all(std::vector<MPI_Request>& requests) {
  for (int round = 0;; ++round) {
    int done = 0;
    if (MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                    MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      echelon::cudasim::detail::fail(cudaErrorLaunchFailure, "NCCL: MPI_Testall failed");
      return;
    }
    if (done) return;
    if (round < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(200, round)));
    }
  }
}

// On the stream's worker thread: posts every operation, then waits for all of them.
void run(const std::vector<Op>& ops) {
  std::vector<MPI_Request> requests;
  // Per communicator, matched in order (submit checked that they pair up).
  std::map<const CommState*, std::vector<const Op*>> self_sends, self_recvs;
  bool posted = true;
  for (const Op& op : ops) {
    MPI_Request request = MPI_REQUEST_NULL;
    const CommState& comm = *op.comm;
    int code = MPI_SUCCESS;
    if (op.kind == Op::AllReduce) {
      if (comm.nranks == 1) {
        if (op.send != op.recv) std::memmove(op.recv, op.send, op.bytes);
      } else {
        code = MPI_Iallreduce(op.send == op.recv ? MPI_IN_PLACE : op.send, op.recv, op.count,
                              op.type, op.op, comm.mpi, &request);
      }
    } else if (op.peer == comm.rank) {
      (op.kind == Op::Send ? self_sends : self_recvs)[&comm].push_back(&op);
    } else if (op.kind == Op::Send) {
      code =
          MPI_Isend(op.send, static_cast<int>(op.bytes), MPI_BYTE, op.peer, 0, comm.mpi, &request);
    } else {
      code =
          MPI_Irecv(op.recv, static_cast<int>(op.bytes), MPI_BYTE, op.peer, 0, comm.mpi, &request);
    }
    posted = posted && code == MPI_SUCCESS;
    if (request != MPI_REQUEST_NULL) requests.push_back(request);
  }
  for (const auto& [comm, sends] : self_sends) {
    const std::vector<const Op*>& recvs = self_recvs[comm];
    for (size_t i = 0; i < sends.size(); ++i)
      std::memcpy(recvs[i]->recv, sends[i]->send, sends[i]->bytes);
  }
  if (!posted) echelon::cudasim::detail::fail(cudaErrorLaunchFailure, "NCCL: posting failed");
  if (!requests.empty()) wait_all(requests);
  echelon::cudasim::detail::check_guards("an NCCL operation");
}

// Enqueues `ops` (one group, or one call), one task per stream in call order.
ncclResult_t submit(const std::vector<Op>& ops) {
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end())
      streams.push_back(op.stream);
  }
  for (cudaStream_t stream : streams) {
    std::vector<Op> mine;
    std::map<CommState*, std::vector<size_t>> self_sent, self_received;  // bytes, in order
    for (const Op& op : ops) {
      if (op.stream != stream) continue;
      mine.push_back(op);
      if (op.kind != Op::AllReduce && op.peer == op.comm->rank)
        (op.kind == Op::Send ? self_sent : self_received)[op.comm.get()].push_back(op.bytes);
    }
    if (self_sent != self_received)
      return usage(ncclInvalidUsage,
                   "a send to (or receive from) the rank itself needs its matching receive (or "
                   "send) of the same size in the same group, on the same stream");
    std::vector<std::shared_ptr<CommState>> comms;
    for (const Op& op : mine) {
      if (std::find(comms.begin(), comms.end(), op.comm) != comms.end()) continue;
      comms.push_back(op.comm);
      std::lock_guard lock(op.comm->mutex);
      ++op.comm->in_flight;
    }
    const cudaError_t queued = echelon::cudasim::detail::enqueue(stream, [mine, comms] {
      run(mine);
      for (const auto& comm : comms) {
        std::lock_guard lock(comm->mutex);
        --comm->in_flight;
        comm->idle.notify_all();
      }
    });
    if (queued != cudaSuccess) {
      for (const auto& comm : comms) {
        std::lock_guard lock(comm->mutex);
        --comm->in_flight;
      }
      return usage(ncclInvalidArgument, "the stream does not exist");
    }
  }
  return ncclSuccess;
}

// Checks an operation's arguments as NCCL would, then runs it (or keeps it for ncclGroupEnd).
ncclResult_t add(Op op, size_t count, ncclDataType_t type, const char* call) {
  if (op.comm == nullptr) return usage(ncclInvalidArgument, std::string(call) + ": null comm");
  const size_t element = size_of(type);
  if (element == 0) return usage(ncclInvalidArgument, std::string(call) + ": unknown datatype");
  if (count > static_cast<size_t>(INT_MAX) / element)
    return usage(ncclInvalidArgument, std::string(call) + ": more than 2 GiB (MPI's limit)");
  op.bytes = count * element;
  op.count = static_cast<int>(count);
  const CommState& comm = *op.comm;
  if (op.kind != Op::AllReduce && (op.peer < 0 || op.peer >= comm.nranks))
    return usage(ncclInvalidArgument, std::string(call) + ": peer " + std::to_string(op.peer) +
                                          " of a communicator of " + std::to_string(comm.nranks));
  for (const void* buffer : {op.send, static_cast<const void*>(op.recv)}) {
    if (buffer == nullptr || op.bytes == 0) continue;
    using echelon::cudasim::detail::device_of;
    using echelon::cudasim::detail::where;
    if (where(buffer, op.bytes) != Where::Device || device_of(buffer) != comm.device)
      return usage(ncclInvalidArgument,
                   std::string(call) + ": a buffer of " + std::to_string(op.bytes) +
                       " bytes is not device memory of cuda:" + std::to_string(comm.device));
  }
  if (op.bytes == 0) return ncclSuccess;
  if (t_group_depth > 0) {
    t_group.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return submit(one);
}

}  // namespace

struct ncclComm {
  std::shared_ptr<CommState> state;
};

namespace echelon::cudasim {

void set_nccl_bootstrap(MPI_Comm world) {
  std::lock_guard lock(g_bootstrap_mutex);
  g_bootstrap = world;
}

}  // namespace echelon::cudasim

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return ncclInvalidArgument;
  IdContents id{};
  std::memcpy(id.magic, kMagic, sizeof(kMagic));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(bootstrap_world(), &id.root);
  id.sequence = g_sequence++;
  std::memset(unique_id->internal, 0, sizeof(unique_id->internal));
  std::memcpy(unique_id->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return usage(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                          std::to_string(nranks));
  IdContents id;
  std::memcpy(&id, comm_id.internal, sizeof(id));
  if (std::memcmp(id.magic, kMagic, sizeof(kMagic)) != 0)
    return usage(ncclInvalidArgument, "ncclCommInitRank: not an id from ncclGetUniqueId");
  auto state = std::make_shared<CommState>();
  state->nranks = nranks;
  state->rank = rank;
  state->device = echelon::cudasim::detail::current_device();
  if (nranks > 1) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
      return usage(ncclInvalidUsage,
                   "the emulated NCCL runs on MPI: a communicator of " + std::to_string(nranks) +
                       " ranks needs MPI initialised (MPI_THREAD_MULTIPLE; run under mpirun)");
    const MPI_Comm world = bootstrap_world();
    int me = 0, world_size = 0;
    MPI_Comm_rank(world, &me);
    MPI_Comm_size(world, &world_size);
    if (nranks > world_size)
      return usage(ncclInvalidUsage, "a communicator of " + std::to_string(nranks) +
                                         " ranks in an MPI world of " + std::to_string(world_size) +
                                         " processes");
    const int tag = kTagBase + static_cast<int>(id.sequence % kTagRange);
    std::vector<int> members(static_cast<size_t>(nranks), -1);  // world rank by NCCL rank
    members[static_cast<size_t>(rank)] = me;
    if (rank == 0) {
      if (id.root != me)
        return usage(ncclInvalidUsage, "ncclCommInitRank: rank 0 must be the id's maker");
      for (int joined = 1; joined < nranks; ++joined) {
        int hello[2] = {-1, -1};  // NCCL rank, world rank
        if (ncclResult_t r =
                check(MPI_Recv(hello, 2, MPI_INT, MPI_ANY_SOURCE, tag, world, MPI_STATUS_IGNORE),
                      "MPI_Recv");
            r != ncclSuccess)
          return r;
        if (hello[0] < 1 || hello[0] >= nranks || members[static_cast<size_t>(hello[0])] >= 0)
          return usage(ncclInvalidUsage,
                       "ncclCommInitRank: rank " + std::to_string(hello[0]) + " joined twice");
        members[static_cast<size_t>(hello[0])] = hello[1];
      }
      for (int r = 1; r < nranks; ++r) {
        if (ncclResult_t result = check(MPI_Send(members.data(), nranks, MPI_INT,
                                                 members[static_cast<size_t>(r)], tag, world),
                                        "MPI_Send");
            result != ncclSuccess)
          return result;
      }
    } else {
      int hello[2] = {rank, me};
      if (ncclResult_t r = check(MPI_Send(hello, 2, MPI_INT, id.root, tag, world), "MPI_Send");
          r != ncclSuccess)
        return r;
      if (ncclResult_t r = check(
              MPI_Recv(members.data(), nranks, MPI_INT, id.root, tag, world, MPI_STATUS_IGNORE),
              "MPI_Recv");
          r != ncclSuccess)
        return r;
    }
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(world, &world_group);
    MPI_Group_incl(world_group, nranks, members.data(), &group);
    const int made = MPI_Comm_create_group(world, group, tag, &state->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (ncclResult_t r = check(made, "MPI_Comm_create_group"); r != ncclSuccess) return r;
  }
  *comm = new ncclComm{std::move(state)};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclInvalidArgument;
  {
    std::unique_lock lock(comm->state->mutex);
    comm->state->idle.wait(lock, [&] { return comm->state->in_flight == 0; });
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm->state->mpi != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm->state->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  Op all_reduce;
  all_reduce.send = sendbuff;
  all_reduce.recv = recvbuff;
  all_reduce.type = mpi_type(datatype);
  if (all_reduce.type == MPI_DATATYPE_NULL)
    return usage(ncclInvalidArgument, "ncclAllReduce: half-precision sums are not emulated");
  switch (op) {
    case ncclSum:
      all_reduce.op = MPI_SUM;
      break;
    case ncclProd:
      all_reduce.op = MPI_PROD;
      break;
    case ncclMax:
      all_reduce.op = MPI_MAX;
      break;
    case ncclMin:
      all_reduce.op = MPI_MIN;
      break;
    case ncclAvg:
      return usage(ncclInvalidArgument, "ncclAllReduce: ncclAvg is not emulated");
  }
  all_reduce.comm = comm ? comm->state : nullptr;
  all_reduce.stream = stream;
  return add(std::move(all_reduce), count, datatype, "ncclAllReduce");
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Op send;
  send.kind = Op::Send;
  send.send = sendbuff;
  send.peer = peer;
  send.comm = comm ? comm->state : nullptr;
  send.stream = stream;
  return add(std::move(send), count, datatype, "ncclSend");
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  Op recv;
  recv.kind = Op::Recv;
  recv.recv = recvbuff;
  recv.peer = peer;
  recv.comm = comm ? comm->state : nullptr;
  recv.stream = stream;
  return add(std::move(recv), count, datatype, "ncclRecv");
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) return usage(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group_depth > 0) return ncclSuccess;
  std::vector<Op> group;
  group.swap(t_group);
  return submit(group);
}
