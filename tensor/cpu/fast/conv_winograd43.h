// Winograd F(4x4, 3x3) with AVX-512, the forward, (on the transposed geometry) backward-data and
// weight-gradient path of conv_winograd.h where conv_winograd_tile() is F4x4 and the geometry
// fits. Each 4x4 block of outputs comes from a 6x6 input tile: 36 transformed positions, so 36 /
// 16 = 2.25 multiplies per output and input channel where F(2x2, 3x3) does 4 and the direct sum
// 9. The matrices are Lavin & Gray's (2016) for the points 0, 1, -1, 2, -2 and infinity.
//
// Rounding: the transforms scale the terms up before they cancel (B^T's rows sum to up to 10 in
// magnitude, A^T's to 19, G's to 1): with |x| = |w| = 1, sum over the 36 positions of
// |A^T| (|G| |g| |G^T| x |B^T| |d| |B|) |A| reaches 256 x sum |x| |w| at a tile's corner output
// (F(2x2): 7.1), so the float error is of order eps x 256 x sum |x| |w|, not eps x |y|. Measured
// against the naive twin in double (tests/cpu/conv_winograd_test.cpp; weights uniform in [-1, 1],
// inputs uniform or ReLU-like non-negative, 8 to 64 channels): 13-82 eps x sum |x| |w| (F(2x2):
// below 1), and 177 at the corners of a padding-2 layer, whose window holds 1 pixel of the tile's
// 16 (the error scales with the tile, the unit with the window); the tests assert 256. On
// ResNet-20's 32x32 and 16x16 layers F(4x4) and F(2x2) differ by ~5e-6 of the largest output
// (exp_conv_cpu --winograd-tiles).
#pragma once

#include <echelon/kernels/conv.h>

namespace echelon::cpu::fast {

// True when conv_winograd43_forward takes `a`: an AVX-512 CPU, 3x3, stride 1, dilation 1, the same
// padding (0..2) both ways, at least 8 input channels, out_h a multiple of 4 and the 4x4 tiles of
// an image filling whole vectors of 16: out_w / 4 tile columns of 4 or 8 (out_w 16 or 32; then
// out_h / 4 a multiple of 4 or 2) or a multiple of 16 (out_w % 64 == 0); or 8x8 outputs (4
// tiles: a vector holds 4 images).
bool conv_winograd43_usable(const Conv2dGeometry& a);

// y (N, O, OH, OW) = conv(x (N, C, H, W), w (O, C, 3, 3)) + bias (O); bias may be null. With
// accumulate, y += that instead (each output y + value, in its one store pass).
void conv_winograd43_forward(const Conv2dGeometry& a, const float* x, const float* w,
                             const float* bias, float* y, bool accumulate = false);

// grad_w (O, C, 3, 3) from grad_out (N, O, OH, OW) and x (N, C, H, W) where
// conv_winograd43_usable(a): dU = sum over the 6x6 tiles of (B^T d B) * (A dY A^T), then
// dw = G^T dU G. Overwrites grad_w; per-thread partials are added in chunk order (the result
// depends on the thread count, not on timing). Its rounding grows with the transforms as the
// forward's (above), in units of eps x sum |grad_out| |x| over the weight's window.
void conv_winograd43_backward_weight(const Conv2dGeometry& a, const float* grad_out, const float* x,
                                     float* grad_w);

}  // namespace echelon::cpu::fast
