// CUDA emulation: the device-side language, so that cuda/kernels/*.cu compile as C++.
//
// Each CUDA thread runs as a fiber; the block's fibers share one OS thread, so `__shared__`
// becomes `thread_local` (a block-scope thread_local is static: one instance per OS thread, i.e.
// per running block, and two streams running kernels on two worker threads never share it).
// Barriers and warp collectives switch fibers (cuda/sim/scheduler.cpp). Dynamic shared memory
// is ECH_DYNAMIC_SHARED(T, name) (cuda/launch.h), NaN-filled at every block start.
#pragma once

#include <math.h>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include <echelon/cuda/sim/api.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ thread_local

namespace echelon::cudasim::detail {

// The running CUDA thread's coordinates (set by the scheduler before each switch to a fiber).
struct Coordinates {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const Coordinates& coordinates();
void* dynamic_shared();

enum class WarpOp : uint8_t { Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, Syncwarp };
// Blocks the fiber until every lane named in `mask` reached a warp op; returns this lane's
// result (shuffled value bits, or the ballot word).
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                 int line);
// Fails the running block with `message` (the launch's sticky error) and unwinds its threads.
[[noreturn]] void device_error(const std::string& message);
// __syncthreads and its counting variants: returns the number of threads with pred != 0.
int barrier(int pred, const char* file, int line);
// cp.async (<cuda_pipeline.h>), per thread as on the GPU: a copy is queued (its destination
// turns to 0xFF bytes, NaN, at once: it is undefined until the copy is waited for), a commit
// closes the queued copies into a group, and a wait lands the groups older than the newest
// `prior` (source bytes read then, zfill bytes zeroed). Copies never waited for are dropped when
// the thread exits.
void async_copy(void* dst, const void* src, size_t size, size_t zfill, const char* file, int line);
void async_commit();
void async_wait_prior(size_t prior);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffle of a type > 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace echelon::cudasim::detail

#define threadIdx (::echelon::cudasim::detail::coordinates().thread_idx)
#define blockIdx (::echelon::cudasim::detail::coordinates().block_idx)
#define blockDim (::echelon::cudasim::detail::coordinates().block_dim)
#define gridDim (::echelon::cudasim::detail::coordinates().grid_dim)
constexpr int warpSize = 32;

// __builtin_FILE/__builtin_LINE as default arguments give the caller's file:line (gcc and clang),
// so that an error names the barrier or shuffle at fault.
#define ECH_SIM_SITE const char *file = __builtin_FILE(), int line = __builtin_LINE()

inline void __syncthreads(ECH_SIM_SITE) {
  echelon::cudasim::detail::barrier(1, file, line);
}
inline int __syncthreads_count(int pred, ECH_SIM_SITE) {
  return echelon::cudasim::detail::barrier(pred ? 1 : 0, file, line);
}
inline int __syncthreads_and(int pred, ECH_SIM_SITE) {
  const dim3 b = blockDim;
  return echelon::cudasim::detail::barrier(pred ? 1 : 0, file, line) ==
         static_cast<int>(b.x * b.y * b.z);
}
inline int __syncthreads_or(int pred, ECH_SIM_SITE) {
  return echelon::cudasim::detail::barrier(pred ? 1 : 0, file, line) != 0;
}

#define ECH_SIM_SHUFFLE(name, op)                                                         \
  template <typename T>                                                                   \
  inline T name(unsigned mask, T var, int arg, int width = warpSize, ECH_SIM_SITE) {      \
    using namespace echelon::cudasim::detail;                                             \
    return from_bits<T>(warp_op(WarpOp::op, mask, to_bits(var), arg, width, file, line)); \
  }
ECH_SIM_SHUFFLE(__shfl_sync, Shfl)
ECH_SIM_SHUFFLE(__shfl_up_sync, ShflUp)
ECH_SIM_SHUFFLE(__shfl_down_sync, ShflDown)
ECH_SIM_SHUFFLE(__shfl_xor_sync, ShflXor)
#undef ECH_SIM_SHUFFLE

inline unsigned __ballot_sync(unsigned mask, int pred, ECH_SIM_SITE) {
  using namespace echelon::cudasim::detail;
  return static_cast<unsigned>(warp_op(WarpOp::Ballot, mask, pred ? 1 : 0, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int pred, ECH_SIM_SITE) {
  using namespace echelon::cudasim::detail;
  return static_cast<int>(warp_op(WarpOp::Any, mask, pred ? 1 : 0, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int pred, ECH_SIM_SITE) {
  using namespace echelon::cudasim::detail;
  return static_cast<int>(warp_op(WarpOp::All, mask, pred ? 1 : 0, 0, 32, file, line));
}
inline void __syncwarp(unsigned mask = 0xffffffffu, ECH_SIM_SITE) {
  using namespace echelon::cudasim::detail;
  warp_op(WarpOp::Syncwarp, mask, 0, 0, 32, file, line);
}
#undef ECH_SIM_SITE

// ---- atomics: real atomics, because two streams may run kernels at the same time --------------
namespace echelon::cudasim::detail {
template <typename T, typename F>
T atomic_update(T* address, F f) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, f(old))) {
  }
  return old;
}
}  // namespace echelon::cudasim::detail

template <typename T>
inline T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <typename T>
inline T atomicSub(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_sub(value);
}
template <typename T>
inline T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
inline T atomicMin(T* address, T value) {
  return echelon::cudasim::detail::atomic_update(address,
                                                 [&](T old) { return value < old ? value : old; });
}
template <typename T>
inline T atomicMax(T* address, T value) {
  return echelon::cudasim::detail::atomic_update(address,
                                                 [&](T old) { return value > old ? value : old; });
}
template <typename T>
inline T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;  // the old value either way
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_system() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

// A trap ends the launch with a sticky error, like the real one.
[[noreturn]] inline void __trap() {
  echelon::cudasim::detail::device_error("__trap() called");
}

// ---- loads and math: host versions of the device intrinsics ----------------------------------
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

using std::isfinite;
using std::isinf;
using std::isnan;

inline float __expf(float x) {
  return std::exp(x);
}
inline float __exp10f(float x) {
  return std::pow(10.0f, x);
}
inline float __logf(float x) {
  return std::log(x);
}
inline float __log2f(float x) {
  return std::log2(x);
}
inline float __log10f(float x) {
  return std::log10(x);
}
inline float __sinf(float x) {
  return std::sin(x);
}
inline float __cosf(float x) {
  return std::cos(x);
}
inline float __tanf(float x) {
  return std::tan(x);
}
inline float __powf(float x, float y) {
  return std::pow(x, y);
}
inline float __fdividef(float x, float y) {
  return x / y;
}
inline float __frcp_rn(float x) {
  return 1.0f / x;
}
inline float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
inline float __fadd_rn(float x, float y) {
  return x + y;
}
inline float __fmul_rn(float x, float y) {
  return x * y;
}
inline float __fmaf_rn(float x, float y, float z) {
  return std::fma(x, y, z);
}
inline float __saturatef(float x) {
  return std::isnan(x) ? 0.0f : (x < 0 ? 0.0f : (x > 1 ? 1.0f : x));
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline double rsqrt(double x) {
  return 1.0 / std::sqrt(x);
}
inline int __float2int_rn(float x) {
  return static_cast<int>(std::nearbyint(x));
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}

// CUDA's global min/max overloads (math_functions.h) for the integer and floating types.
#define ECH_SIM_MINMAX(T)  \
  inline T min(T a, T b) { \
    return a < b ? a : b;  \
  }                        \
  inline T max(T a, T b) { \
    return a > b ? a : b;  \
  }
ECH_SIM_MINMAX(int)
ECH_SIM_MINMAX(unsigned)
ECH_SIM_MINMAX(long)
ECH_SIM_MINMAX(unsigned long)
ECH_SIM_MINMAX(long long)
ECH_SIM_MINMAX(unsigned long long)
#undef ECH_SIM_MINMAX
inline float min(float a, float b) {
  return std::fmin(a, b);
}
inline float max(float a, float b) {
  return std::fmax(a, b);
}
inline double min(double a, double b) {
  return std::fmin(a, b);
}
inline double max(double a, double b) {
  return std::fmax(a, b);
}
