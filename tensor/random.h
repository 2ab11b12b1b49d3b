// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011). A draw is a pure function of
// (seed, offset, element index), so the CPU and CUDA backends produce identical uniforms and
// Bernoulli masks, and normals equal to float rounding. A Generator hands out disjoint offset
// ranges: each op that draws n numbers advances the offset by n.
#pragma once

#include <atomic>
#include <cstdint>

#include "base/op_kinds.h"

namespace echelon {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // first counter this op may use
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed), offset_(0) {}
  Generator(const Generator& other) : seed_(other.seed_), offset_(other.offset()) {}
  Generator& operator=(const Generator& other) {
    set_state(other.seed_, other.offset());
    return *this;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_.load(std::memory_order_relaxed); }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_.store(offset, std::memory_order_relaxed);
  }
  // Reserves `count` numbers and returns the state the op should draw from. Atomic, so ops on
  // several threads (pipeline stages) can share one generator and still draw disjoint ranges.
  PhiloxState reserve(uint64_t count) {
    const uint64_t calls = (count + 3) / 4;  // one Philox call yields four 32-bit numbers
    return PhiloxState{seed_, offset_.fetch_add(calls, std::memory_order_relaxed)};
  }

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_;
};

// The process-wide default generator (seeded by manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

// ---- Philox-4x32-10 core, shared verbatim by the CPU twin and the CUDA kernels ----
struct Philox4 {
  uint32_t x[4];
};

ECH_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Four 32-bit random words for counter `counter` under key `seed`.
ECH_HD Philox4 philox4x32(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    const uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// The i-th 32-bit word of the stream that starts at `state`.
ECH_HD uint32_t philox_word(PhiloxState state, uint64_t i) {
  return philox4x32(state.seed, state.offset + i / 4).x[i % 4];
}

// Uniform in [0, 1) with 24 random bits: exactly representable, so identical on every backend.
ECH_HD float philox_uniform(PhiloxState state, uint64_t i) {
  return static_cast<float>(philox_word(state, i) >> 8) * (1.0f / 16777216.0f);
}

}  // namespace echelon
