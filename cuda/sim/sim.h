// CUDA emulation: the knobs and the launch entry point. Tests and tools use the knobs; the
// kernels reach `launch` only through ECH_LAUNCH (cuda/launch.h).
//
// Environment (read once, at the first launch or runtime call; a bad value aborts with a message
// naming it; docs/environment.md):
//   ECHELON_CUDASIM_ORDER=forward|reverse|random:SEED   thread and block order (default forward)
//   ECHELON_CUDASIM_GRID_CAP=N    caps grid_for()'s grids at N blocks (default 0: the real cap),
//                                 so that grid-stride loops really loop
//   ECHELON_CUDASIM_DEVICES=N     number of emulated devices, 0..64 (default 1; 0 = "no device")
//   ECHELON_CUDASIM_PEER=0        no peer access between devices (default 1)
//   ECHELON_CUDASIM_MEMORY_MB=N   memory per device (default 8192)
//   ECHELON_CUDASIM_ABORT=1       abort() at the first kernel error instead of a sticky error
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <echelon/cuda/sim/api.h>

namespace echelon::cudasim {

enum class OrderKind : uint8_t { Forward, Reverse, Random };
struct Order {
  OrderKind kind = OrderKind::Forward;
  uint64_t seed = 0;  // Random only
};
// "forward", "reverse", "random:SEED"; throws std::invalid_argument on anything else.
Order parse_order(const std::string& text);
std::string to_string(Order order);
// The order used by launches enqueued from now on (all threads, all streams).
void set_order(Order order);
Order order();

// 0 = no cap beyond the kernel's own.
void set_grid_cap(unsigned blocks);
unsigned grid_cap(unsigned kernel_cap);  // min(kernel_cap, the set cap)

// A kernel failure (divergent barrier, bad shuffle mask, deadlock, out-of-bounds write into a
// guard, any access into a guard region, host pointer argument) makes the emulated context
// unusable, as on a GPU: every later runtime call returns the sticky error. Tests of the emulator
// itself read and clear it.
std::string sticky_message();  // empty when none
void clear_sticky_error();     // waits for every stream first

struct Stats {
  uint64_t kernels = 0, blocks = 0, threads = 0;
};
Stats stats();
// Host synchronisations so far (cudaStreamSynchronize, cudaDeviceSynchronize,
// cudaEventSynchronize; a blocking cudaMemcpy is one), from every thread: tests use it to show
// that a code path never waits for the device.
uint64_t host_synchronizations();

namespace detail {

// Pointer arguments of a launch, checked to point into device or pinned memory.
struct PointerArg {
  int index;
  const void* ptr;
};

// Validates the configuration (the error goes to cudaGetLastError, as a real launch's does)
// and enqueues `body` to run once per CUDA thread of every block on `stream`.
// `func`: the kernel's address (its cudaFuncSetAttribute opt-in).
void launch(const char* kernel, const void* func, const char* file, int line, dim3 grid, dim3 block,
            size_t dynamic_smem, cudaStream_t stream, std::vector<PointerArg> pointers,
            std::function<void()> body);

}  // namespace detail
}  // namespace echelon::cudasim
