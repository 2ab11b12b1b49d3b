// Sleeping on a 32-bit word and waking its sleepers: Linux futex called directly, elsewhere
// std::atomic::wait/notify_all. Not libstdc++'s atomic::wait on Linux: it spins and calls
// sched_yield() several times before sleeping, and on a loaded machine each yield can hand the
// core to another process for a whole time slice (bench_ring: the blocking rings ran at a few
// percent of the mutex queue's speed until parking went straight to the futex).
#pragma once

#include <atomic>
#include <climits>
#include <cstdint>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace echelon::data::detail {

// Sleeps while `word` holds `expected` (returns at once if it does not; may return spuriously).
inline void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
#else
  word.wait(expected, std::memory_order_acquire);
#endif
}

// Wakes every thread sleeping on `word`.
inline void futex_wake_all(std::atomic<uint32_t>& word) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
#else
  word.notify_all();
#endif
}

}  // namespace echelon::data::detail
