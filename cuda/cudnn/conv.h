// The cuDNN convolution path (ConvImpl::Cudnn): same arguments as cuda/kernels/conv.h, through
// the legacy cudnnConvolution{Forward,BackwardData,BackwardFilter} API. Algorithms come from
// cuDNN's heuristics (the *_v7 queries, several candidates each): plain FP32 math (FMA) first so
// results match the CPU twin, and the first candidate whose workspace fits and that cuDNN
// accepts runs. Descriptors and that choice are cached per (device, direction, shapes, window,
// dtype, policy): later calls of a shape skip the descriptors and the heuristic query.
// Workspace comes from the caching allocator. Declared in every CUDA build;
// defined only when cuDNN was found (ECHELON_WITH_CUDNN), so callers guard on that.
#pragma once

#include <echelon/base/op_kinds.h>

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cudnn {

// How an algorithm is chosen among cuDNN's heuristic candidates.
struct AlgoPolicy {
  // Only candidates cuDNN reports as CUDNN_DETERMINISTIC (bitwise-reproducible runs; backward
  // filter/data algorithm 0 accumulate with atomics). None eligible: the call throws rather than
  // run a non-deterministic one.
  bool deterministic = false;
  // Tf32: tensor-op math candidates first (cuDNN rounds to TF32 inside), then default, then FMA.
  // Bf16: as Tf32 (fp32 convolutions in cuDNN have no bf16 compute mode).
  // Fp32: FMA math first, so results match the CPU twin to fp32 rounding.
  Precision precision = Precision::Fp32;
};

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, AlgoPolicy policy = {});
void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream, AlgoPolicy policy = {});
void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream, AlgoPolicy policy = {});
// A fixed reduction over (N, H, W): deterministic, no algorithm to choose.
void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          int device, cudaStream_t stream);

}  // namespace echelon::cudnn
