// Batch assembly from a data set resident on the device (`--resident-data`): ONE struct from the
// op (ops::augment_gather) down to the CPU twin (tensor/cpu/shape) and the CUDA kernel
// (cuda/kernels/shape).
//
// out[b, c, y, x] = pixel * scale[c] + shift[c], where pixel is image plan[b].index's byte at
// (c, y + dy - pad, x' + dx - pad) with x' = flip ? width - 1 - x : x, and 0 where that falls into
// the padding: the padding-crop and horizontal flip of data::augment_image followed by
// data::to_float, so resident batches equal the loader's bit for bit.
#pragma once

#include <cstdint>

namespace echelon {

// One row of a batch plan (int32): the example, its crop offsets and its flip.
enum AugmentPlanColumn : int64_t { kPlanIndex = 0, kPlanDy, kPlanDx, kPlanFlip, kPlanColumns };

struct AugmentGatherArgs {
  static constexpr int64_t kMaxChannels = 4;
  int64_t examples = 0;  // N: images held
  int64_t batch = 0;     // B: plan rows
  int64_t channels = 0, height = 0, width = 0;
  int64_t pad = 0;  // crop padding P: each plan's dy, dx lie in [0, 2P]
  // Per-channel normalisation (data::normalise_coefficients).
  float scale[kMaxChannels] = {}, shift[kMaxChannels] = {};
};

}  // namespace echelon
