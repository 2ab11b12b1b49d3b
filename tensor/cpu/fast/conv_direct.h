// Direct convolution for the fast CPU path (float, chosen at run time): square windows from 3x3
// to 5x5 (ResNet's 3x3 / padding 1 / stride 1 or 2 layers, LeNet's 5x5 ones) without an im2col
// matrix, in two instruction sets (conv_direct_isa()):
// - AVX2 + FMA (conv_direct.cpp), any stride 1 or 2: each image is copied once into a zero-padded
//   buffer (split into even and odd columns at stride 2 for the forward, so every vector load is
//   contiguous). The forward (and the backward-data at stride 1, the forward on flipped weights)
//   keeps 3 output channels x 32 output columns in registers while it walks the input channels
//   and taps; the weight gradient keeps 6 taps x 16 output channels, summing outer products over
//   the output positions (an input broadcast times the 16 channels' gradients at that position,
//   from a position-major copy of grad_out).
// - AVX-512 (conv_direct_avx512.h): output positions in the lanes (a whole plane as one run,
//   from per-column-offset copies of the image, per row phase at stride 2), 6 rows x 64
//   positions per register tile; the backward data multiplies w^T by grad_out and sums the
//   columns back with masked (at stride 2 expanding) loads, so the zero padding of the flipped
//   forward costs nothing; the weight gradient of a layer with a multiple of 16 output channels
//   (and C > 1) keeps the channels in the lanes (outer products, R x K taps per tile).
// conv.cpp's im2col + GEMM path handles every other geometry, float64, and CPUs without AVX2; the
// naive twins (tensor/cpu/conv.h) are the oracle of all of them. conv.cpp asks Winograd
// (conv_winograd.h) first: it takes the 3x3 / stride 1 layers whose sizes fit its tiles.
#pragma once

#include <functional>

#include <echelon/kernels/conv.h>

namespace echelon::cpu::fast {

// The instruction set of the kernels below: AVX-512 where the CPU has it (the default), else
// AVX2; tests set each in turn. Process-wide; choosing AVX-512 on a CPU without it throws.
enum class DirectIsa { Avx2, Avx512 };
void set_conv_direct_isa(DirectIsa isa);
DirectIsa conv_direct_isa();
bool conv_direct_avx512_available();

// True when the kernels below take `a`: a square K x K window with 1 <= K <= 5, the same padding
// both ways and below K, dilation 1, the same stride 1 or 2 both ways, and a CPU with AVX2 and FMA
// (asked once). The baseline build needs neither.
bool conv_direct_usable(const Conv2dGeometry& a);

// Same contracts as conv2d_forward / conv2d_backward_input / conv2d_backward_weight (conv.h).
// y (N, O, OH, OW) from x (N, C, H, W), w (O, C, K, K) and bias (O) or null.
void conv_direct_forward(const Conv2dGeometry& a, const float* x, const float* w, const float* bias,
                         float* y);
// True when conv_direct_backward_input takes `a` (conv_direct_usable(a) holds): stride 1, or
// stride 2 with the AVX-512 kernels.
bool conv_direct_backward_input_usable(const Conv2dGeometry& a);
// grad_in (N, C, H, W) from grad_out (N, O, OH, OW) and w, when
// conv_direct_backward_input_usable(a) (AVX2: a convolution of grad_out with the flipped weights
// and padding K-1-pad). Overwrites grad_in.
void conv_direct_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                float* grad_in);
// True when conv_direct_backward_input on `a` runs the AVX-512 kernel, which can add into grad_in
// (conv_direct_backward_input_add).
bool conv_direct_backward_input_adds(const Conv2dGeometry& a);
// grad_in += conv_direct_backward_input's result (each element grad_in + value), where
// conv_direct_backward_input_adds(a).
void conv_direct_backward_input_add(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                    float* grad_in);
// grad_w (O, C, K, K) from grad_out and x. Overwrites grad_w; per-thread partials are added in
// chunk order, so the result depends on the thread count, not on timing.
void conv_direct_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                 float* grad_w);
// gt (P, op) = planes (O, P) transposed, channels O..op-1 zero (op >= O): position-major, so a
// weight-gradient tile loads 8 channels at one position as one vector. AVX2 (as above).
void conv_direct_transpose_planes(const float* planes, int64_t o, int64_t positions, int64_t op,
                                  float* gt);

// The weight gradients' frame (AVX2 and AVX-512): images split into the pool's chunks, each
// chunk's images [begin, end) summing their (tap, channel) products into the chunk's own zeroed
// acc (taps, op) via run(begin, end, acc); then grad_w (O, taps) = the chunks' sums added in
// chunk order (the result depends on the thread count, not on timing). The partials live in the
// caller's scratch slot 1: run may use slot 0.
void conv_direct_weight_by_chunks(
    const Conv2dGeometry& a, int64_t taps, int64_t op,
    const std::function<void(int64_t begin, int64_t end, float* acc)>& run, float* grad_w);
// How a weight-gradient pass covers about `positions` output positions, so that their
// gradients stay in L1 over all taps: `band` rows of one image, or `group` whole small images.
struct WeightPassShape {
  int64_t band, group;
};
WeightPassShape conv_direct_weight_pass_shape(const Conv2dGeometry& a, int64_t positions);

}  // namespace echelon::cpu::fast
