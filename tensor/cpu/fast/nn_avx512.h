// AVX-512 twins of the fast batch norm's per-plane float loops (nn.cpp). Each keeps the portable
// loop's arithmetic exactly: the same 32 sum lanes (lane i takes the terms s = i mod 32, a tail's
// terms lanes 0, 1, ...), folded in the same tree, and every product rounded before its add (no
// fused multiply-adds). So their results are bit-identical to the portable loops'; the gain is
// 16 floats per instruction and 32 registers, where the portable loops get SSE2's 4 and spill.
// Declared on x86-64 only; nn.cpp calls them when the CPU has AVX-512F.
#pragma once

#if defined(__x86_64__)
#define ECHELON_NORM_AVX512 1

#include <cstdint>

namespace echelon::cpu::fast::norm_avx512 {

// Whether this CPU runs AVX-512F.
bool cpu_has();

// plane (spatial): sum over s of plane[s], and of (plane[s] - m)^2.
float plane_sum(const float* plane, int64_t spatial);
float plane_squares(const float* plane, int64_t spatial, float m);

// Batch norm's backward pass 1 over one plane: *sum_dy = sum of d, *sum_dy_xc = sum of
// d * (in - mean), where d = dy, or with relu d = (out > 0 ? dy : 0); d stored in masked when it
// is not null. dy, out, in, masked (spatial).
void plane_sums(bool relu, const float* dy, const float* out, const float* in, float mean,
                int64_t spatial, float* masked, float* sum_dy, float* sum_dy_xc);

// plane_sums with relu, the mask recomputed from the input: d = (in * scale + shift > 0 ? dy : 0),
// scale and shift the fused forward's (the same product and add as normalize, so the same signs
// as its y, without reading y). dy, in (spatial).
void plane_sums_relu_of_input(const float* dy, const float* in, float scale, float shift,
                              float mean, int64_t spatial, float* sum_dy, float* sum_dy_xc);

// The forward's store pass over one plane: v = in * scale + shift (+ residual when not null),
// y = relu ? (v > 0 ? v : 0) : v. in, residual, y (spatial).
void normalize(const float* in, const float* residual, float scale, float shift, bool relu,
               int64_t spatial, float* y);

// The backward's pass 2 over one plane: grad_in = k * d + kx * (in - mean) + k0, with d = masked
// when it is not null, else d = dy, or with relu (out > 0 ? dy : 0). All (spatial).
void apply_gradient(const float* masked, const float* dy, const float* out, bool relu,
                    const float* in, float mean, float k, float kx, float k0, int64_t spatial,
                    float* grad_in);

// apply_gradient with d as plane_sums_relu_of_input's. dy, in, grad_in (spatial).
void apply_gradient_relu_of_input(const float* dy, const float* in, float scale, float shift,
                                  float mean, float k, float kx, float k0, int64_t spatial,
                                  float* grad_in);

}  // namespace echelon::cpu::fast::norm_avx512

#endif
