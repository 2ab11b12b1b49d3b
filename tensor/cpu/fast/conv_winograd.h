// Winograd F(2x2, 3x3) convolution for the fast CPU path (float, AVX2 + FMA, chosen at run time):
// ResNet's 3x3 / stride 1 layers with 8 or more input channels. Each 2x2 block of outputs comes
// from a 4x4 input tile: the tile and the 3x3 weights are transformed to 4x4 (B^T d B, G g G^T),
// multiplied elementwise and summed over the input channels (16 small GEMMs, one per transformed
// position, 16 multiplies where the direct kernel does 36), and transformed back (A^T m A). Its
// rounding differs from the direct sum's: the transforms add and subtract inputs (and weights
// halved), so the error grows with the tile's magnitudes, a few times float epsilon x sum |x w|
// (Lavin & Gray 2016). Vectors hold 8 tiles: two runs of 4 side by side in a tile row, so the
// output width must be a multiple of 8 and the height even (ResNet's 32, 16, 8); conv_direct.h
// takes every other geometry. With AVX-512 all three directions of ResNet-20's 32x32, 16x16 and
// 8x8 layers (and others, conv_winograd43_usable) run F(4x4, 3x3) instead (conv_winograd43.h:
// 2.25 multiplies per output where F(2x2) does 4; 1.0-1.4x faster per layer, its error up to
// ~100x F(2x2)'s). The naive twins (tensor/cpu/conv.h) are the oracle.
#pragma once

#include <echelon/kernels/conv.h>

namespace echelon::cpu::fast {

// The register tiles of the forward and backward-data GEMMs: AVX2 (6 output channels x 16 tiles
// in 12 registers) or AVX-512 (16 x 16 in 16), with the transforms of a 16-tile pass in one
// register. The default is AVX-512 where the CPU has it; tests set each in turn. Process-wide;
// choosing AVX-512 on a CPU without it throws.
enum class WinogradIsa { Avx2, Avx512 };
void set_conv_winograd_isa(WinogradIsa isa);
WinogradIsa conv_winograd_isa();
bool conv_winograd_avx512_available();

// The output block of the forward and backward-data transforms with AVX-512: F4x4 takes F(4x4,
// 3x3) wherever conv_winograd43_usable() (it measured faster on every shape it takes that was
// timed: ResNet-20's three; exp_conv_cpu --winograd-tiles), F2x2 always
// F(2x2, 3x3). AVX2 always runs F(2x2). The default is F4x4; tests set each in turn.
// Process-wide.
enum class WinogradTile { F2x2, F4x4 };
void set_conv_winograd_tile(WinogradTile tile);
WinogradTile conv_winograd_tile();
// True when conv_winograd_forward (on `a`) runs F(4x4, 3x3) under the current settings.
bool conv_winograd_f43_chosen(const Conv2dGeometry& a);

// True when conv_winograd_forward takes `a`: 3x3, stride 1, dilation 1, the same padding (0..2)
// both ways, out_w a multiple of 8, out_h even, at least 8 input channels (fewer leave the GEMMs
// too short to pay for the transforms), and a CPU with AVX2 and FMA.
bool conv_winograd_usable(const Conv2dGeometry& a);
// True when conv_winograd_backward_input takes `a`: the forward test on the transposed geometry
// (grad_out (N, O, OH, OW) in, grad_in (N, C, H, W) out, padding 2 - pad).
bool conv_winograd_backward_input_usable(const Conv2dGeometry& a);

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, 3, 3)) + bias (O); bias may be null.
void conv_winograd_forward(const Conv2dGeometry& a, const float* x, const float* w,
                           const float* bias, float* y);
// True when conv_winograd_backward_input can add into grad_in: usable, and F(4x4) chosen on the
// transposed geometry (its output transform adds in its store pass).
bool conv_winograd_backward_input_adds(const Conv2dGeometry& a);
// grad_in (N, C, H, W) from grad_out (N, O, OH, OW) and w: the forward on grad_out with w
// transposed to (C, O, 3, 3) and turned by 180 degrees. Overwrites grad_in, or with accumulate
// (only where conv_winograd_backward_input_adds) adds to it.
void conv_winograd_backward_input(const Conv2dGeometry& a, const float* grad_out, const float* w,
                                  float* grad_in, bool accumulate = false);

// grad_w (O, C, 3, 3) from grad_out (N, O, OH, OW) and x (N, C, H, W), when
// conv_winograd_usable(a): dU = sum over tiles of (B^T d B) * (A dY A^T), then G^T dU G; with
// F(4x4, 3x3) where conv_winograd_f43_chosen(a) (conv_winograd43_backward_weight: 1.2-1.45x
// faster than F(2x2) on ResNet-20's three layers on an AMD EPYC), else F(2x2, 3x3).
// Overwrites grad_w; per-thread partials are added in chunk order (the result depends on the
// thread count, not on timing).
void conv_winograd_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                   float* grad_w);

}  // namespace echelon::cpu::fast
