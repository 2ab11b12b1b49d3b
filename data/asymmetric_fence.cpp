#include <echelon/data/asymmetric_fence.h>

#include <echelon/base/env.h>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace echelon::data::detail {

std::atomic<bool> g_asymmetric_fences{false};

namespace {

#if defined(__linux__) && !defined(ECHELON_TSAN)
long membarrier(int command) {
  return syscall(__NR_membarrier, command, 0);
}

// Query the supported commands, then register: expedited private membarrier needs both.
// ECHELON_NO_MEMBARRIER=1 forces the fallback (to test and to compare it); a bad value throws from
// the first ring's constructor, where a bad capacity would.
bool register_membarrier() {
  if (env::flag("ECHELON_NO_MEMBARRIER", false)) return false;
  const long supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}
#else
bool register_membarrier() {
  return false;
}
#endif

}  // namespace

bool asymmetric_fences_enabled() {
  static const bool enabled = [] {
    const bool registered = register_membarrier();
    g_asymmetric_fences.store(registered, std::memory_order_relaxed);
    return registered;
  }();
  return enabled;
}

void asymmetric_fence_heavy_slow() {
#if defined(ECHELON_TSAN)
  g_tsan_fence_word.fetch_add(1, std::memory_order_acq_rel);
  return;
#elif defined(__linux__)
  if (g_asymmetric_fences.load(std::memory_order_relaxed)) {
    // Cannot fail once registered (EINVAL/EPERM only without registration).
    if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return;
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace echelon::data::detail
