// cuDNN convolution: descriptors built per call (cheap next to the convolution itself), the best
// heuristic algorithm that cuDNN reports usable, workspace from the caching allocator. Freeing
// the workspace right after the enqueue is safe: the allocator reuses a block only on the same
// stream, so a later user is ordered after this convolution.
#if ECHELON_WITH_CUDNN
#include <echelon/cuda/cudnn/conv.h>

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

// First heuristic result cuDNN marks usable, preferring plain FMA kernels, then default math;
// `kind` names the direction in the error. The heuristics may report another math type than the
// descriptor's (the _v7 queries try several); the descriptor is set to the chosen one, because a
// convolution call whose algorithm and descriptor disagree on it can fail.
template <typename Perf>
Perf pick(const Perf* results, int count, cudnnConvolutionDescriptor_t conv, const char* kind) {
  const Perf* chosen = nullptr;
  for (const cudnnMathType_t preferred : {CUDNN_FMA_MATH, CUDNN_DEFAULT_MATH}) {
    for (int i = 0; i < count && !chosen; ++i)
      if (results[i].status == CUDNN_STATUS_SUCCESS && results[i].mathType == preferred)
        chosen = &results[i];
  }
  for (int i = 0; i < count && !chosen; ++i)
    if (results[i].status == CUDNN_STATUS_SUCCESS) chosen = &results[i];
  ECH_CHECK(chosen != nullptr, "conv2d (cudnn): no usable ", kind, " algorithm among ", count,
            " candidates");
  ECH_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, chosen->mathType));
  return *chosen;
}

constexpr int kMaxAlgos = 16;

}  // namespace

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  cudnnConvolutionFwdAlgoPerf_t perf[kMaxAlgos];
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x, d.w, d.conv, d.y, kMaxAlgos,
                                                         &count, perf));
  const auto best = pick(perf, count, d.conv, "forward");
  Workspace ws(device, best.memory, stream);
  const float one = 1.0f, zero = 0.0f;
  ECH_CUDNN_CHECK(cudnnConvolutionForward(handle, &one, d.x, x, d.w, w, d.conv, best.algo, ws.get(),
                                          best.memory, &zero, d.y, y));
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
                           float* grad_in, int device, cudaStream_t stream) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  cudnnConvolutionBwdDataAlgoPerf_t perf[kMaxAlgos];
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, d.w, d.y, d.conv, d.x,
                                                              kMaxAlgos, &count, perf));
  const auto best = pick(perf, count, d.conv, "backward-data");
  Workspace ws(device, best.memory, stream);
  const float one = 1.0f, zero = 0.0f;
  ECH_CUDNN_CHECK(cudnnConvolutionBackwardData(handle, &one, d.w, w, d.y, grad_out, d.conv,
                                               best.algo, ws.get(), best.memory, &zero, d.x,
                                               grad_in));
}

void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream) {
  cuda::DeviceGuard guard(device);
  cudnnHandle_t handle = cuda::cudnn_handle(device, stream);
  Descriptors d(a);
  cudnnConvolutionBwdFilterAlgoPerf_t perf[kMaxAlgos];
  int count = 0;
  ECH_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, d.x, d.y, d.conv, d.w,
                                                                kMaxAlgos, &count, perf));
  const auto best = pick(perf, count, d.conv, "backward-filter");
  Workspace ws(device, best.memory, stream);
  const float one = 1.0f, zero = 0.0f;
  ECH_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle, &one, d.x, x, d.y, grad_out, d.conv,
                                                 best.algo, ws.get(), best.memory, &zero, d.w,
                                                 grad_w));
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
