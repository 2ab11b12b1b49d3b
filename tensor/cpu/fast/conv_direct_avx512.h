// The AVX-512 direct convolution at stride 1 and 2 (conv_direct_avx512.cpp), behind
// conv_direct.h's entry points when conv_direct_isa() is Avx512. Output positions go in the vector
// lanes: an image's output plane is one run of OH*OW floats, and a "shifted copy" of the input
// makes every tap a run of the same length: at stride 1, copy kj holds, per channel and padded
// input row, the OW columns kj - pad .. kj - pad + OW - 1 (zero outside the image), so tap
// (c, ki, kj) of output position p = oh*OW + ow is element ki*OW + p of copy kj's channel c; at
// stride 2 each kj has two copies, of the even and of the odd padded rows, holding every other
// column, and the tap is element (ki / 2)*OW + p of copy (kj, ki % 2). All 16 lanes do useful
// work whatever OW is (LeNet's 8-column layers waste half of a 16-column vector, its 6-channel
// layers 10 of 16 lanes with the channels there). The forward and the weight gradient (but for
// layers with a multiple of 16 output channels and more than one input channel,
// conv_direct_avx512_weight.cpp, which reads a padded image) read the copy; the backward data
// multiplies w^T by grad_out into columns (rows c*K*K + ki*K + kj, positions p) and sums them
// back into grad_in with masked loads (at stride 2 expanding ones: every other input column takes
// a given tap), touching no padding.
#pragma once

#include <echelon/kernels/conv.h>

namespace echelon::cpu::fast {

// True when the kernels below take `a` (conv_direct_usable(a) holds already): stride 1 or 2 and
// the per-image buffers within their budgets. The caller checks the CPU
// (conv_direct_isa()).
bool conv_direct_avx512_takes(const Conv2dGeometry& a);

// Same contracts as conv_direct_forward / _backward_input / _backward_weight (conv_direct.h).
void conv_direct_forward_avx512(const Conv2dGeometry& a, const float* x, const float* w,
                                const float* bias, float* y);
// With accumulate grad_in += the gradient (each element grad_in + value, in the store pass).
void conv_direct_backward_input_avx512(const Conv2dGeometry& a, const float* grad_out,
                                       const float* w, float* grad_in, bool accumulate = false);
void conv_direct_backward_weight_avx512(const Conv2dGeometry& a, const float* grad_out,
                                        const float* x, float* grad_w);

// The weight gradient with the output channels in the lanes instead
// (conv_direct_avx512_weight.cpp): outer products of a broadcast input and 16 channels' gradients,
// faster when O is a multiple of 16 (no lane idle) and C > 1. conv_direct_backward_weight_avx512
// hands such layers to it.
bool conv_direct_weight_outer_suits(const Conv2dGeometry& a);
void conv_direct_backward_weight_outer_avx512(const Conv2dGeometry& a, const float* grad_out,
                                              const float* x, float* grad_w);

}  // namespace echelon::cpu::fast
