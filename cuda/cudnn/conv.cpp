// cuDNN convolution: descriptors built per call (cheap next to the convolution itself), the
// heuristic candidates tried in order until one runs, workspace from the caching allocator.
// Freeing the workspace right after the enqueue is safe: the allocator reuses a block only on the
// same stream, so a later user is ordered after this convolution.
#if ECHELON_WITH_CUDNN
#include <echelon/cuda/cudnn/conv.h>

#include <optional>
#include <string>
#include <vector>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/cudnn/handle.h>
#include <echelon/cuda/stream.h>

namespace echelon::cudnn {

namespace {

int as_int(int64_t v) {
  ECH_CHECK(v >= 0 && v <= 0x7fffffff, "conv2d (cudnn): size ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

// The four descriptors of one convolution, destroyed on scope exit.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  explicit Descriptors(const Conv2dGeometry& a) {
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    ECH_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    ECH_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    ECH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(a.n),
                                               as_int(a.c), as_int(a.h), as_int(a.w)));
    ECH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(a.n),
                                               as_int(a.o), as_int(a.out_h), as_int(a.out_w)));
    ECH_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, as_int(a.o),
                                               as_int(a.c), as_int(a.kernel_h),
                                               as_int(a.kernel_w)));
    ECH_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv, as_int(a.pad_h), as_int(a.pad_w), as_int(a.stride_h), as_int(a.stride_w),
        as_int(a.dilation_h), as_int(a.dilation_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    // Plain FP32 FMA: TF32 tensor cores would differ from the CPU twin by ~1e-3.
    ECH_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, CUDNN_FMA_MATH));
  }
  ~Descriptors() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// Scratch memory from the caching allocator, returned on scope exit.
class Workspace {
 public:
  Workspace(int device, size_t nbytes, cudaStream_t stream) : device_(device) {
    if (nbytes > 0) ptr_ = cuda::device_malloc(device, nbytes, stream);
  }
  ~Workspace() {
    if (ptr_) cuda::device_free(device_, ptr_);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }

 private:
  int device_;
  void* ptr_ = nullptr;
};

// Order of preference among math types: plain FP32 FMA kernels match the CPU twin; default math
// may use TF32 tensor cores on Hopper (~1e-3 relative); explicit tensor-op math last.
// ALLOW_CONVERSION (inputs rounded to half precision) is never used.
int math_rank(cudnnMathType_t math) {
  switch (math) {
    case CUDNN_FMA_MATH:
      return 0;
    case CUDNN_DEFAULT_MATH:
      return 1;
    case CUDNN_TENSOR_OP_MATH:
      return 2;
    default:
      return -1;
  }
}
constexpr int kMathRanks = 3;

// Tries cuDNN's heuristic candidates (already in its predicted-speed order) by math rank: the
// first whose workspace the allocator can provide and whose call cuDNN accepts wins. Under a
// deterministic policy only CUDNN_DETERMINISTIC candidates are eligible. `run(perf, workspace)`
// enqueues the convolution and returns cuDNN's status. The descriptor's math type is set to the
// candidate's, because a call whose algorithm and descriptor disagree on it can fail.
template <typename Perf, typename Run>
void run_first_usable(const std::vector<Perf>& results, cudnnConvolutionDescriptor_t conv,
                      AlgoPolicy policy, int device, cudaStream_t stream, const char* kind,
                      Run run) {
  std::string tried;
  int eligible = 0;
  for (int rank = 0; rank < kMathRanks; ++rank) {
    for (const Perf& perf : results) {
      if (perf.status != CUDNN_STATUS_SUCCESS || math_rank(perf.mathType) != rank) continue;
      if (policy.deterministic && perf.determinism != CUDNN_DETERMINISTIC) continue;
      ++eligible;
      ECH_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, perf.mathType));
      std::optional<Workspace> ws;
      try {
        ws.emplace(device, perf.memory, stream);
      } catch (const Error&) {
        tried += str(" algo ", static_cast<int>(perf.algo), ": workspace of ", perf.memory,
                     " bytes did not fit;");
        continue;
      }
      const cudnnStatus_t status = run(perf, ws->get());
      if (status == CUDNN_STATUS_SUCCESS) {
        if (cuda::sync_launches())
          cuda::sync_after_launch(str("conv2d ", kind, " (cudnn)").c_str(), __FILE__, __LINE__);
        return;
      }
      tried += str(" algo ", static_cast<int>(perf.algo), ": ", cudnnGetErrorString(status), ";");
    }
  }
  ECH_FAIL("conv2d (cudnn): no usable ", kind, " algorithm among ", results.size(),
           " heuristic candidates (", eligible, " eligible",
           policy.deterministic ? ", deterministic only" : "", ")",
           tried.empty() ? std::string() : str(":", tried),
           policy.deterministic ? "; our kernels (ConvImpl::Ours) are deterministic" : "");
}

}  // namespace

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, AlgoPolicy policy) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  int max_count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, max_count,
                                                         &count, perf.data()));
  perf.resize(static_cast<size_t>(count));
  const float one = 1.0f, zero = 0.0f;
  run_first_usable(perf, d.conv, policy, device, stream, "forward",
                   [&](const cudnnConvolutionFwdAlgoPerf_t& p, void* ws) {
                     return cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv, p.algo,
                                                    ws, p.memory, &zero, d.y, y);
                   });
  if (bias) {
    cudnnTensorDescriptor_t bias_desc = nullptr;
    ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_desc));
    const cudnnStatus_t status = cudnnSetTensor4dDescriptor(bias_desc, CUDNN_TENSOR_NCHW,
                                                            CUDNN_DATA_FLOAT, 1, as_int(a.o), 1, 1);
    const cudnnStatus_t added = status == CUDNN_STATUS_SUCCESS
                                    ? cudnnAddTensor(handle, &one, bias_desc, bias, &one, d.y, y)
                                    : status;
    cudnnDestroyTensorDescriptor(bias_desc);
    ECH_CUDNN_CHECK(added);
  }
}

void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream, AlgoPolicy policy) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  int max_count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x,
                                                              max_count, &count, perf.data()));
  perf.resize(static_cast<size_t>(count));
  const float one = 1.0f, zero = 0.0f;
  run_first_usable(perf, d.conv, policy, device, stream, "backward-data",
                   [&](const cudnnConvolutionBwdDataAlgoPerf_t& p, void* ws) {
                     return cudnnConvolutionBackwardData(handle, &one, d.w, w, d.y, grad_out,
                                                         d.conv, p.algo, ws, p.memory, &zero, d.x,
                                                         grad_in);
                   });
}

void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream, AlgoPolicy policy) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  int max_count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w,
                                                                max_count, &count, perf.data()));
  perf.resize(static_cast<size_t>(count));
  const float one = 1.0f, zero = 0.0f;
  run_first_usable(perf, d.conv, policy, device, stream, "backward-filter",
                   [&](const cudnnConvolutionBwdFilterAlgoPerf_t& p, void* ws) {
                     return cudnnConvolutionBackwardFilter(handle, &one, d.x, x, d.y, grad_out,
                                                           d.conv, p.algo, ws, p.memory, &zero, d.w,
                                                           grad_w);
                   });
}

void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          int device, cudaStream_t stream) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  cudnnTensorDescriptor_t bias_desc = nullptr;
  ECH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_desc));
  const cudnnStatus_t status = cudnnSetTensor4dDescriptor(bias_desc, CUDNN_TENSOR_NCHW,
                                                          CUDNN_DATA_FLOAT, 1, as_int(a.o), 1, 1);
  const float one = 1.0f, zero = 0.0f;
  const cudnnStatus_t reduced =
      status == CUDNN_STATUS_SUCCESS
          ? cudnnConvolutionBackwardBias(handle, &one, d.y, grad_out, &zero, bias_desc, grad_bias)
          : status;
  cudnnDestroyTensorDescriptor(bias_desc);
  ECH_CUDNN_CHECK(reduced);
}

}  // namespace echelon::cudnn
#endif  // ECHELON_WITH_CUDNN
