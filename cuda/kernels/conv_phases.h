// Launcher of cuda/kernels/conv_phases.cu: the input gradient of a strided convolution (dilation
// 1) as one stride-1 implicit GEMM per phase of the input pixels, so that no tap that can never
// reach a pixel is multiplied (conv_gemm.cu's plain grad input multiplies 1 - 1/(sh*sw) of its K
// by zeros). ConvConfig::phases selects it (conv.cu, run_conv); the heuristic sets it wherever
// it applies, unless set_conv_dgrad_phases(false). Float only, device pointers.
#pragma once

#include <cuda_runtime.h>

#include <echelon/cuda/kernels/conv_gemm.h>
#include <echelon/kernels/conv.h>

namespace echelon::cuda {

// Whether the phase decomposition takes this input gradient: a stride above 1 and dilation 1.
bool dgrad_phases_fit(const Conv2dGeometry& a);

// The stride-1 sub-problem of the largest phase (ceil(H/sh) x ceil(W/sw) pixels, a
// ceil(KH/sh) x ceil(KW/sw) kernel; O, C and grad_out's OH x OW unchanged): the geometry the
// heuristic and the autotuner's candidate list see, one config for every phase.
Conv2dGeometry dgrad_phase_bound(const Conv2dGeometry& a);

// grad_in (N, C, H, W) = the input gradient of grad_out (N, O, OH, OW) through w (O, C, KH, KW),
// phase by phase with `config`'s tile (dgrad_phases_fit must hold). Overwrites grad_in, or with
// `accumulate` adds the gradient to it (as conv2d_backward_input_implicit).
void conv2d_backward_input_phases(const ConvConfig& config, const Conv2dGeometry& a,
                                  const float* grad_out, const float* w, float* grad_in,
                                  cudaStream_t stream, bool accumulate = false);

// The heuristic's choice of the phases where they apply: on by default, off when the environment
// sets ECHELON_CONV_DGRAD_PHASES=0 (an A/B switch; off, the autotuner lists only the plain
// grad-input GEMM). Process-wide.
void set_conv_dgrad_phases(bool on);
bool conv_dgrad_phases();

}  // namespace echelon::cuda
