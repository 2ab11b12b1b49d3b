// NcclCommunicator (nccl_comm.h): thin, checked wrappers over ncclCommInitRank, ncclAllReduce,
// ncclSend and ncclRecv on the caller's current stream.
#include <echelon/parallel/nccl_comm.h>

#if ECHELON_WITH_NCCL

#include <cstring>

#include <nccl.h>

#include <echelon/base/error.h>
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/stream.h>

namespace echelon::parallel {

namespace {

void check_nccl(ncclResult_t result, const char* what) {
  if (result == ncclSuccess) return;
  ECH_FAIL("NCCL ", what, " failed: ", ncclGetErrorString(result));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int64:
      return ncclInt64;
    case DType::Int32:
      return ncclInt32;
    case DType::UInt8:
      return ncclUint8;
    case DType::BFloat16:
      return ncclBfloat16;
  }
  ECH_FAIL("NCCL: unknown dtype");
}

void check_tensor(const Tensor& t, int device, const char* what) {
  ECH_CHECK(t.defined() && t.is_cuda() && t.device().index == device && t.is_contiguous(), "NCCL ",
            what, ": needs a contiguous tensor on cuda:", device);
}

}  // namespace

struct NcclCommunicator::Handle {
  ncclComm_t comm = nullptr;
};

static_assert(sizeof(ncclUniqueId) == sizeof(NcclCommunicator::UniqueId));

NcclCommunicator::NcclCommunicator(int size, int rank, int device,
                                   const std::function<void(UniqueId& id)>& share_id)
    : handle_(std::make_unique<Handle>()), size_(size), rank_(rank), device_(device) {
  ECH_CHECK(size >= 1 && rank >= 0 && rank < size, "NCCL: rank ", rank, " of ", size);
  UniqueId id{};
  if (rank == 0) {
    ncclUniqueId made;
    check_nccl(ncclGetUniqueId(&made), "ncclGetUniqueId");
    std::memcpy(id.data(), &made, sizeof(made));
  }
  if (size > 1) share_id(id);
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), sizeof(unique));
  cuda::DeviceGuard guard(device);
  check_nccl(ncclCommInitRank(&handle_->comm, size, unique, rank), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (handle_->comm != nullptr) ncclCommDestroy(handle_->comm);
}

void NcclCommunicator::all_reduce_sum(const std::vector<Tensor>& tensors) {
  cuda::DeviceGuard guard(device_);
  cudaStream_t stream = cuda::current_stream(device_);
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (const Tensor& t : tensors) {
    check_tensor(t, device_, "all-reduce");
    check_nccl(ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.numel()),
                             nccl_type(t.dtype()), ncclSum, handle_->comm, stream),
               "ncclAllReduce");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclCommunicator::exchange(const std::vector<std::pair<Tensor, int>>& sends,
                                const std::vector<std::pair<Tensor, int>>& receives) {
  cuda::DeviceGuard guard(device_);
  cudaStream_t stream = cuda::current_stream(device_);
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (const auto& [t, peer] : sends) {
    check_tensor(t, device_, "send");
    check_nccl(ncclSend(t.raw_data(), t.nbytes(), ncclUint8, peer, handle_->comm, stream),
               "ncclSend");
  }
  for (const auto& [t, peer] : receives) {
    check_tensor(t, device_, "recv");
    check_nccl(ncclRecv(t.raw_data(), t.nbytes(), ncclUint8, peer, handle_->comm, stream),
               "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
}

void NcclChannel::send(const Tensor& tensor) {
  const int device = comm_.device();
  cuda::Event produced;
  produced.record(cuda::current_stream(device));
  produced.wait(stream_.get());
  {
    cuda::StreamGuard guard(stream_);
    comm_.exchange({{tensor, peer_}}, {});
  }
  cuda::record_stream(device, tensor.storage()->data(), stream_.get());
}

Tensor NcclChannel::recv(const Shape& shape, DType dtype) {
  const int device = comm_.device();
  Tensor tensor = Tensor::empty(shape, dtype, Device::cuda(device));
  cudaStream_t compute = cuda::current_stream(device);
  cuda::Event free_to_write;  // the block may still be read by queued work on `compute`
  free_to_write.record(compute);
  free_to_write.wait(stream_.get());
  {
    cuda::StreamGuard guard(stream_);
    comm_.exchange({}, {{tensor, peer_}});
  }
  cuda::Event arrived;
  arrived.record(stream_.get());
  arrived.wait(compute);
  cuda::record_stream(device, tensor.storage()->data(), stream_.get());
  return tensor;
}

std::string NcclCommunicator::version() {
  int code = 0;
  check_nccl(ncclGetVersion(&code), "ncclGetVersion");
  // NCCL >= 2.9 encodes MAJOR*10000 + MINOR*100 + PATCH.
  return str(code / 10000, ".", (code / 100) % 100, ".", code % 100);
}

}  // namespace echelon::parallel

#endif
