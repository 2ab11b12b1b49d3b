// The kernels a piece of code launches, counted by the CUDA emulation (ECHELON_CUDA_SIM builds).
#pragma once

#if ECHELON_CUDA_SIM
#include <cstdint>

#include <echelon/cuda/check.h>
#include <echelon/cuda/sim/sim.h>

namespace echelon::test {

// The kernels `f` launches: the emulator counts a kernel when it runs, so the device is
// synchronised before and after.
template <typename F>
uint64_t kernels_of(F f) {
  ECH_CUDA_CHECK(cudaDeviceSynchronize());
  const uint64_t before = cudasim::stats().kernels;
  f();
  ECH_CUDA_CHECK(cudaDeviceSynchronize());
  return cudasim::stats().kernels - before;
}

}  // namespace echelon::test
#endif
