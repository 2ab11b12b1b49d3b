// CUDA emulation: the NCCL entry points Echelon uses (parallel/nccl_comm.cpp), with NCCL's names,
// signatures, enum values and error codes, implemented on MPI (cuda/sim/nccl.cpp; built only
// when CMake finds MPI). Device memory is host memory here, so each operation hands the device
// pointers to MPI. As on a GPU, every operation is enqueued on its stream and runs in stream
// order on the stream's worker thread, asynchronously to the host; a group
// (ncclGroupStart/End) posts all its operations non-blocking and waits for them together, so
// grouped sends and receives never deadlock. Buffers must be device memory of the
// communicator's device (checked: ncclInvalidArgument, explained on stderr).
//
// Bootstrap: a unique id names its root process; ncclCommInitRank builds an MPI communicator of
// exactly the members (MPI_Comm_create_group) over the bootstrap communicator, MPI_COMM_WORLD
// unless set_nccl_bootstrap named another (a world that met through a rendezvous). A one-rank
// communicator needs no MPI at all.
#pragma once

#include <cstddef>

#include <echelon/cuda/sim/api.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 3
#define NCCL_VERSION_CODE (NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH)
#define NCCL_UNIQUE_ID_BYTES 128

struct ncclComm;
using ncclComm_t = ncclComm*;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

ncclResult_t ncclGetVersion(int* version);
const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
// Collective over the `nranks` processes; binds the communicator to the current device.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
// Waits for the communicator's enqueued operations, then frees it.
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommCount(ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
