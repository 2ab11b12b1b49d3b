// Pooling geometry shared by the CPU twins (tensor/cpu/pool) and the CUDA kernels (cuda/kernels/pool).
// Window (oh, ow) covers input rows [oh*stride_h - pad_h, +kernel_h) and columns likewise,
// clipped to the image; out_h/out_w come from the caller (floor or ceil mode, as PyTorch).
#pragma once

#include <cstdint>

namespace echelon {

// Input (n, c, h, w) -> output (n, c, out_h, out_w), one plane per (n, c).
struct PoolArgs {
  int64_t n = 1, c = 1, h = 1, w = 1;
  int64_t out_h = 1, out_w = 1;
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average pooling: divide by the padded window size
};

}  // namespace echelon
