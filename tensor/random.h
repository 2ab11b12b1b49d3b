// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011). A draw is a pure function of
// (seed, offset, element index), so the CPU and CUDA backends produce identical uniforms and
// Bernoulli masks, and normals equal to float rounding. A Generator hands out disjoint offset
// ranges: each op that draws n numbers advances the offset by n.
#pragma once

#include <atomic>
#include <cstdint>

#include <echelon/kernels/philox.h>

namespace echelon {

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

}  // namespace echelon
