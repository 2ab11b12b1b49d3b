// The host allocator's cache: freed CPU blocks are kept by size class and handed out again, so a
// training step, which allocates the same sizes every time, makes no malloc/free (and no fresh
// page faults) after the first step. Cached bytes are bounded; beyond the bound a freed block
// goes back to the system. Under AddressSanitizer the cache is off by default (ASan's own
// quarantine then sees every use after free); cached blocks are poisoned when it is turned on.
#pragma once

#include <cstddef>
#include <cstdint>

namespace echelon {

struct CpuCacheStats {
  size_t cached_bytes = 0;  // free blocks held for reuse
  int64_t hits = 0;         // allocations served from the cache
  int64_t misses = 0;       // allocations that went to the system
};

// The most bytes the cache may hold (0 turns it off and frees what it holds). Default 1 GiB (0
// under ASan), or $ECHELON_CPU_CACHE_MB MiB when set (0..16777216; another value throws at the
// first CPU allocation). Process-wide.
void set_cpu_cache_limit(size_t bytes);
size_t cpu_cache_limit();
CpuCacheStats cpu_cache_stats();
// Frees every cached block (memory in use is untouched).
void empty_cpu_cache();
// The size class a request of `nbytes` is served from (>= nbytes, at most 1/8 above it beyond
// 4 KiB; multiples of 64 bytes).
size_t cpu_cache_size_class(size_t nbytes);

}  // namespace echelon
