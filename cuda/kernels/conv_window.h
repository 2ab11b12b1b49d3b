// Launchers of cuda/kernels/conv_window.cu: the forward and the input gradient (stride 1, or 2
// for 3-wide kernels) of a convolution as a direct sliding-window convolution over rows staged in
// shared memory, instead of the implicit GEMM's gathered tiles (conv_gemm.h), whose 16- and
// 32-row tiles spend most of a k-slice on the gathers (bench/RESULTS.md, session 36): the
// heuristic's choice for few output channels (at most 64: LeNet-5, ResNet's three stages, the
// first layers of AlexNet and VGG-16 that fit), an autotuner candidate up to 512.
// ConvConfig::window selects it; the heuristic (conv.cu, conv_heuristic) picks it where
// conv_window_preferred says, unless set_conv_window(false). Under TF32 / bf16 it rounds both
// operands as it stages them, as the tensor-core tiles' fragments do, and multiplies them in fp32
// (exact for rounded values). Float, device pointers.
#pragma once

#include <cuda_runtime.h>

#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/kernels/conv.h>

namespace echelon::cuda {

// Whether the window kernel takes pass `pass` (Forward or BackwardData) of `a`: dilation 1,
// stride 1 (or 2 with a kernel 3 wide and at least 2 high), a kernel width of 3 or
// 5 and height up to 7, at most 512 output channels of the pass (O forward, C for the input
// gradient), output rows of at most 1024 pixels, one input channel's staged rows within the
// smallest block's staging budget (192 bytes a thread), and 32-bit indices (conv_gemm_fits).
bool conv_window_fits(ConvPass pass, const Conv2dGeometry& a);
// Whether the heuristic takes it (conv.cu, conv_heuristic): where it fits with at most 64 output
// channels of the pass (one block's channels: LeNet-5, ResNet, the first layers of AlexNet and
// VGG-16). Above 64 it is one more of the autotuner's candidates (conv_candidates): each block of
// 64 channels stages the same input rows, where the GEMM tiles share them across 128 channels.
bool conv_window_preferred(ConvPass pass, const Conv2dGeometry& a);

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, KH, KW)) + bias (O; null: none), ReLU'd at the
// store with `relu`. Each output is one thread's fmaf chain over (c, ki, kj) in order: under fp32
// the implicit GEMM's bits (its FMA cores sum in the same order).
void conv2d_forward_window(const Conv2dGeometry& a, const float* x, const float* w,
                           const float* bias, float* y, cudaStream_t stream, bool relu = false);
// grad_in (N, C, H, W) = the input gradient of grad_out (N, O, OH, OW) through w, summed over
// (o, ki, kj) in order (under fp32 the implicit GEMM's bits, at stride 2 its phase GEMMs'); with
// `accumulate`, added to grad_in (one add).
void conv2d_backward_input_window(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                  float* grad_in, cudaStream_t stream, bool accumulate = false);

// The heuristic's choice of the window kernel where it fits: on by default, off when the
// environment sets ECHELON_CONV_WINDOW=0 (an A/B switch for timing; the autotuner lists it either
// way). Process-wide.
void set_conv_window(bool on);
bool conv_window();

}  // namespace echelon::cuda
