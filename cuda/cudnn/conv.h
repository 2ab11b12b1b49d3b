// The cuDNN convolution path (ConvImpl::Cudnn): same arguments as cuda/kernels/conv.h, through
// the legacy cudnnConvolution{Forward,BackwardData,BackwardFilter} API. Algorithms come from
// cuDNN's heuristics (the *_v7 queries), restricted to plain FP32 math (no TF32) so results
// match the CPU twin; workspace comes from the caching allocator. Declared in every CUDA
// build; defined only when cuDNN was found (ECHELON_WITH_CUDNN), so callers guard on that.
#pragma once

#include <cuda_runtime.h>

#include <echelon/kernels/conv.h>

namespace echelon::cudnn {

void conv2d_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                    float* y, int device, cudaStream_t stream);
void conv2d_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                           float* grad_in, int device, cudaStream_t stream);
void conv2d_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                            float* grad_w, int device, cudaStream_t stream);
void conv2d_backward_bias(const Conv2dGeometry& a, const float* grad_out, float* grad_bias,
                          int device, cudaStream_t stream);

}  // namespace echelon::cudnn
