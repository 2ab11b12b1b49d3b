// pinned(x): x, hidden from the compiler's loop-invariant code motion. A staging loop's
// per-thread indices (and everything derived from them: 64-bit offsets, bounds predicates) would
// otherwise be hoisted out of the loop around it, registers live across that loop's FMAs.
// Recomputing them costs a few integer instructions each time. Users: the GEMM tiles' staging
// (gemm_tile.cuh: the warp-tiled 128x128 SGEMM fits 128 registers without spill, bench/RESULTS.md
// fma24) and the window convolution's (conv_window.cu: its stride-2 forward spilled 12 bytes).
#pragma once

namespace echelon::cuda {

__device__ __forceinline__ int pinned(int x) {
#ifdef __CUDA_ARCH__
  asm volatile("" : "+r"(x));
#endif
  return x;
}

}  // namespace echelon::cuda
