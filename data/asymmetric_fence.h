// Asymmetric thread fences: a Dekker handshake whose frequent side costs nothing.
//
// The rings' sleep/wake check is a Dekker pattern: the publisher stores an index then loads the
// sleeper count; the sleeper stores the sleeper count then loads the index. Each side needs a
// store->load barrier (x86 reorders a store with a later load through the store buffer). A plain
// seq_cst fence costs the publisher ~20-40 cycles on EVERY push and pop, though a sleeper is rare.
//
// Linux membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) makes every running thread of this process
// execute a full barrier (by IPI) before it returns. So the publisher (light side) needs only a
// compiler barrier, and the sleeper (heavy side, about to block anyway) pays one system call —
// the technique of Folly's asymmetric_thread_fence_light/heavy. Where membarrier is unavailable
// (old kernel, seccomp, not Linux) both sides use a seq_cst fence; the choice is made once per
// process, before the first ring operation, so the two sides always agree.
//
// Under ThreadSanitizer both sides instead do an acq_rel read-modify-write of one shared word:
// TSan models neither membarrier nor fences (gcc warns -Wtsan), but it does model RMWs; the two
// RMWs are ordered, and the later one synchronises with the earlier, so whichever side comes
// second sees what the other stored before — the same guarantee, and TSan can check the rest.
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__SANITIZE_THREAD__)
#define ECHELON_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ECHELON_TSAN 1
#endif
#endif

namespace echelon::data::detail {

#if defined(ECHELON_TSAN)
inline std::atomic<uint32_t> g_tsan_fence_word{0};
#endif

// Set once by asymmetric_fences_enabled(), never changed afterwards; false (fences on both
// sides) until then.
extern std::atomic<bool> g_asymmetric_fences;

// Registers this process for expedited private membarrier (once; later calls return the cached
// answer). True when the asymmetric fences are in use.
bool asymmetric_fences_enabled();
// The heavy side: a process-wide barrier (membarrier) or a seq_cst fence as fallback.
void asymmetric_fence_heavy_slow();

// The light side, on every publish: a compiler barrier, which is enough only while
// asymmetric_fences_enabled() is true. The caller adds symmetric_fence() when it is false; the
// rings fold that test into the sleeper word they load anyway (detail::Parker), so the fast path
// reads no global.
inline void asymmetric_fence_light() {
#if defined(ECHELON_TSAN)
  g_tsan_fence_word.fetch_add(1, std::memory_order_acq_rel);
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);  // compiler barrier only
#endif
}

// The light side's own fence where asymmetric fences are off. Under TSan a no-op: the light
// side's read-modify-write already orders it (and TSan does not model fences).
inline void symmetric_fence() {
#if !defined(ECHELON_TSAN)
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The sleeper's fence where the publisher uses symmetric_fence() (no membarrier, or a ring that
// fences every publish): a plain seq_cst fence; under TSan the same read-modify-write as the
// other side.
inline void symmetric_fence_sleeper() {
#if defined(ECHELON_TSAN)
  g_tsan_fence_word.fetch_add(1, std::memory_order_acq_rel);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// The heavy side, before a thread re-checks and sleeps.
inline void asymmetric_fence_heavy() {
#if defined(ECHELON_TSAN)
  g_tsan_fence_word.fetch_add(1, std::memory_order_acq_rel);
#else
  asymmetric_fence_heavy_slow();
#endif
}

}  // namespace echelon::data::detail
