// Counter-based random numbers (Philox-4x32-10, Salmon et al. 2011), the part both backends
// share verbatim: a draw is a pure function of (seed, offset, element index), so the CPU twins
// and the CUDA kernels produce identical uniforms and Bernoulli masks, and normals equal to float
// rounding. The Generator that hands out offsets lives in tensor/random.h.
#pragma once

#include <cmath>
#include <cstdint>

#include <echelon/base/op_kinds.h>

namespace echelon {

struct PhiloxState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // first counter this op may use
};

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

// ---- Philox distributions: the exact formulas both backends use ------------------------------
// Normals come in Box-Muller pairs: elements 2j and 2j+1 share words 2j and 2j+1 of the stream
// (so a tensor of n normals consumes n words rounded up to even). Computed in double, so float
// results agree across backends up to the final rounding.
ECH_HD double philox_normal(PhiloxState state, uint64_t i) {
  const uint64_t pair = i / 2;
  // u1 in (0, 1] keeps log() finite; u2 in [0, 1).
  const double u1 =
      (static_cast<double>(philox_word(state, 2 * pair)) + 1.0) * (1.0 / 4294967296.0);
  const double u2 = static_cast<double>(philox_word(state, 2 * pair + 1)) * (1.0 / 4294967296.0);
  const double radius = sqrt(-2.0 * log(u1));
  const double angle = 6.283185307179586 * u2;
  return (i % 2 == 0) ? radius * cos(angle) : radius * sin(angle);
}

// 1 with probability p: compares the exactly representable 24-bit uniform against p.
ECH_HD bool philox_bernoulli(PhiloxState state, uint64_t i, double p) {
  return static_cast<double>(philox_uniform(state, i)) < p;
}

}  // namespace echelon
