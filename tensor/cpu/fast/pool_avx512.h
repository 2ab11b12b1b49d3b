// AVX-512 twins of the fast max pooling's 2x2, stride-2 plane loops (pool.cpp), 16 outputs per
// step. They keep the portable loops' rules exactly (the first maximum of a window, or its last
// NaN; each input's gradient 0 + grad_out or 0), so their results are bit-identical; the gain is
// one masked vector store per 16 argmax indices and gradients, where the portable loops store
// element by element. Declared on x86-64 only; pool.cpp calls them when the CPU has AVX-512F.
#pragma once

#if defined(__x86_64__)
#define ECHELON_POOL_AVX512 1

#include <cstdint>

namespace echelon::cpu::fast::pool_avx512 {

// Whether this CPU runs AVX-512F.
bool cpu_has();

// One plane's 2x2, stride-2 max pooling, of relu(plane) when relu: plane (h, w) with
// 2 out_h <= h, 2 out_w <= w and w < 2^30 (indices in 32-bit lanes) -> y, arg (out_h, out_w); arg
// holds flat indices into plane.
void max_pool_2x2_forward(const float* plane, int64_t w, int64_t out_h, int64_t out_w, bool relu,
                          float* y, int64_t* arg);

// One plane's gradient when every argmax lies in its own 2x2 cell: grad_in (h, w) = 0 + grad_out
// (out_h, out_w) at arg's index, 0 elsewhere; 2 out_h <= h, 2 out_w <= w < 2^30. Returns false,
// with grad_in partly written, as soon as some index lies outside its cell (rows 2 oh, 2 oh + 1,
// columns 2 ow, 2 ow + 1): the caller then scatters the plane instead. relu_out (out_h, out_w;
// may be null): grad_out passes only where relu_out > 0 (ReLU's backward first).
bool max_pool_2x2_backward(const float* grad_out, const int64_t* arg, int64_t h, int64_t w,
                           int64_t out_h, int64_t out_w, float* grad_in,
                           const float* relu_out = nullptr);

}  // namespace echelon::cpu::fast::pool_avx512

#endif
