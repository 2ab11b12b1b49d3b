#include <echelon/parallel/cuda_graph.h>

#if ECHELON_WITH_CUDA

#include <echelon/base/error.h>
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/check.h>

namespace echelon::parallel {

CudaGraphStep::CudaGraphStep(Device device) : device_(device), stream_(device.index) {
  const cuda::DeviceGuard guard(device_.index);
  ECH_CUDA_CHECK(cudaEventCreateWithFlags(&entered_, cudaEventDisableTiming));
  ECH_CUDA_CHECK(cudaEventCreateWithFlags(&left_, cudaEventDisableTiming));
}

CudaGraphStep::~CudaGraphStep() {
  reset();
  cudaEventDestroy(entered_);
  cudaEventDestroy(left_);
}

void CudaGraphStep::enter(cudaStream_t caller) {
  ECH_CUDA_CHECK(cudaEventRecord(entered_, caller));
  ECH_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), entered_, 0));
}

void CudaGraphStep::leave(cudaStream_t caller) {
  ECH_CUDA_CHECK(cudaEventRecord(left_, stream_.get()));
  ECH_CUDA_CHECK(cudaStreamWaitEvent(caller, left_, 0));
}

void CudaGraphStep::capture(const std::function<void()>& step) {
  reset();
  pool_ = cuda::begin_capture_pool(device_.index, stream_.get());
  // Thread-local: the data loader's threads may allocate meanwhile; that is no concern of ours.
  ECH_CUDA_CHECK(cudaStreamBeginCapture(stream_.get(), cudaStreamCaptureModeThreadLocal));
  auto end_capture = [&] {
    const cudaError_t ended = cudaStreamEndCapture(stream_.get(), &graph_);
    cuda::end_capture_pool(device_.index, pool_);
    return ended;
  };
  try {
    step();
  } catch (...) {
    end_capture();
    cudaGetLastError();
    reset();
    throw;
  }
  if (const cudaError_t ended = end_capture(); ended != cudaSuccess) {
    cudaGetLastError();
    reset();
    ECH_FAIL("--cuda-graph: capturing the training step on cuda:", device_.index,
             " failed: ", cudaGetErrorName(ended), " (", cudaGetErrorString(ended),
             "); the step must not synchronise with the device or allocate outside the "
             "caching allocator");
  }
  ECH_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

void CudaGraphStep::replay() {
  ECH_CHECK(exec_ != nullptr, "--cuda-graph: replay before a capture");
  ECH_CUDA_CHECK(cudaGraphLaunch(exec_, stream_.get()));
}

void CudaGraphStep::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  if (pool_) cuda::release_capture_pool(device_.index, pool_, stream_.get());
  pool_ = 0;
}

}  // namespace echelon::parallel

#endif  // ECHELON_WITH_CUDA
