// Seeds for the data pipeline's Philox draws: every random choice is a pure function of
// (seed, epoch, a purpose tag, an item index, a copy number), independent of thread timing.
#pragma once

#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

#include <echelon/tensor/random.h>

namespace echelon::data {

// SplitMix64 finaliser: decorrelates nearby seeds (seed, seed + 1) before they key Philox.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

enum class DrawPurpose : uint64_t {
  Shuffle = 1,
  Augment = 2,
  Echo = 3,
  ShuffleBuffer = 4,
  Crop = 5
};

// Four random words for (seed, epoch, purpose, index, copy).
inline Philox4 data_draw(uint64_t seed, int64_t epoch, DrawPurpose purpose, int64_t index,
                         int64_t copy = 0) {
  const uint64_t key =
      mix64(seed ^ mix64(static_cast<uint64_t>(epoch) * 0x100 + static_cast<uint64_t>(purpose)));
  const uint64_t counter = (static_cast<uint64_t>(index) << 16) ^ static_cast<uint64_t>(copy);
  return philox4x32(key, counter);
}

// Uniform in [0, 1) from a 32-bit word (24 bits: exact in float and double).
inline double unit_uniform(uint32_t word) {
  return static_cast<double>(word >> 8) / 16777216.0;
}

// The order an epoch visits the examples 0..n-1 in: a Fisher-Yates shuffle keyed by (seed, epoch,
// position), or 0..n-1 when not shuffling. The loader's source and ResidentData both use it.
inline std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (!shuffle) return order;
  for (int64_t i = n - 1; i > 0; --i) {
    const Philox4 w = data_draw(seed, epoch, DrawPurpose::Shuffle, i);
    std::swap(order[i], order[((uint64_t{w.x[0]} << 32) | w.x[1]) % (i + 1)]);
  }
  return order;
}

}  // namespace echelon::data
