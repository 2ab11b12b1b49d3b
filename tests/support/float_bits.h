// A float's IEEE-754 bits and back, for the rounding tests that name values by their bits
// (bf16_round, cudasim_wmma, tf32_gpu/bf16_gpu).
#pragma once

#include <bit>
#include <cstdint>

namespace echelon::test {

constexpr float from_bits(uint32_t bits) {
  return std::bit_cast<float>(bits);
}
constexpr uint32_t bits_of(float v) {
  return std::bit_cast<uint32_t>(v);
}

}  // namespace echelon::test
