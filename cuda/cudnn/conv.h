// The cuDNN convolution path (ConvImpl::Cudnn): same arguments as cuda/kernels/conv.h, through
// the legacy cudnnConvolution{Forward,BackwardData,BackwardFilter} API. Algorithms come from
// cuDNN's heuristics (the *_v7 queries, several candidates each): plain FP32 math (FMA) first so
// results match the CPU twin, and the first candidate whose workspace fits and that cuDNN
// accepts runs. Descriptors and that choice are cached per (device, direction, shapes, window,
// dtype, policy): later calls of a shape skip the descriptors and the heuristic query.
// A benchmark policy (`--autotune`, like torch.backends.cudnn.benchmark) times the candidates on
// the first call of a key instead and keeps the fastest. Workspace comes from the caching
// allocator. Declared in every CUDA build;
// defined only when cuDNN was found (ECHELON_WITH_CUDNN), so callers guard on that.
#pragma once

#include <echelon/base/op_kinds.h>

#include <cuda_runtime.h>

#include <string>
#include <vector>

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
  // The first call of a key times every eligible candidate on the call's own buffers (a warm-up
  // run, then up to 3 timed by CUDA events, the fastest kept) instead of taking the first that
  // runs. Eligible: FMA math only under Fp32 (as PyTorch without TF32), every math type under
  // Tf32 and Bf16. Ignored when deterministic (a pick by timing need not repeat) and during stream
  // capture (the heuristic's choice then runs, and is kept).
  bool benchmark = false;
};

// What benchmark policies picked, one entry per timed key in the order timed: the heuristic's
// choice (what a call without the benchmark policy runs) is among the timed candidates.
struct BenchmarkPick {
  int device = 0;
  const char* direction = "";  // "forward", "grad input", "grad weight" (cuda::name(ConvPass))
  Precision precision = Precision::Fp32;
  Conv2dGeometry geometry;
  std::string pick, heuristic;  // "algo 1, tensor-op math"
  double ms = 0, heuristic_ms = 0;
  int candidates = 0;  // timed (those that ran)
};
std::vector<BenchmarkPick> benchmark_picks();

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream, AlgoPolicy policy = {});
// accumulate: grad_in += the gradient (cudnnConvolutionBackwardData's beta = 1: cuDNN's blend, not
// promised bit for bit the gradient then an add; the benchmark policy times the candidates on a
// scratch gradient, so the sum is added to once).
void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream, AlgoPolicy policy = {},
                           bool accumulate = false);
void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream, AlgoPolicy policy = {});
// A fixed reduction over (N, H, W): deterministic, no algorithm to choose.
void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          int device, cudaStream_t stream);

}  // namespace echelon::cudnn
