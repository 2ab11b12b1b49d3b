// The caching host allocator behind cpu_allocator() (tensor/cpu_cache.h).
#include <echelon/tensor/cpu_cache.h>

#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

#include <echelon/base/env.h>
#include <echelon/base/error.h>
#include <echelon/tensor/storage.h>

#if defined(__SANITIZE_ADDRESS__)
#define ECHELON_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ECHELON_ASAN 1
#endif
#endif
#if ECHELON_ASAN
#include <sanitizer/asan_interface.h>
#define ECH_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define ECH_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define ECH_POISON(p, n) ((void)(p), (void)(n))
#define ECH_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace echelon {
namespace {

constexpr size_t kCpuAlignment = 64;           // one cache line, one AVX-512 vector
constexpr size_t kHugePage = size_t{2} << 20;  // x86-64's transparent huge page

// $ECHELON_CPU_CACHE_MB, else 1 GiB (0 under ASan). Read when the allocator is made, at the first
// CPU allocation: a bad value throws there, where an out-of-memory error would, never in
// deallocate (a destructor's call).
size_t default_limit() {
#if ECHELON_ASAN
  constexpr int64_t kDefaultMiB = 0;
#else
  constexpr int64_t kDefaultMiB = 1024;
#endif
  constexpr int64_t kMostMiB = int64_t{1} << 24;  // 16 TiB: a sanity bound
  return static_cast<size_t>(env::integer("ECHELON_CPU_CACHE_MB", kDefaultMiB, 0, kMostMiB)) << 20;
}

class CachingCpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    const size_t size = cpu_cache_size_class(nbytes);
    bool huge = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      huge = size >= kHugePage && limit_ >= size;  // worth it only for a block the cache keeps
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* ptr = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= size;
        ++stats_.hits;
        ECH_UNPOISON(ptr, size);
        return ptr;
      }
      ++stats_.misses;
    }
    void* ptr = nullptr;
    if (huge) {
      // Activations of a few MiB are streamed through by every elementwise and normalisation
      // pass: on 2 MiB pages (where the kernel's THP mode is `madvise`) those passes miss the TLB
      // 512x less often (measured +9% images/s on a ResNet-20 step, bench/RESULTS.md). The first
      // touch then zeroes 2 MiB at a time, once per block: the cache keeps the block afterwards.
      if (posix_memalign(&ptr, kHugePage, size) != 0) ptr = nullptr;
      if (ptr) madvise(ptr, size, MADV_HUGEPAGE);  // advice only: failure leaves small pages
    } else {
      ptr = std::aligned_alloc(kCpuAlignment, size);
    }
    ECH_CHECK(ptr != nullptr, "cpu allocator: out of host memory allocating ", nbytes, " bytes (",
              cpu_cache_stats().cached_bytes, " bytes cached)");
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    const size_t size = cpu_cache_size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stats_.cached_bytes + size <= limit_) {
        ECH_POISON(ptr, size);
        free_[size].push_back(ptr);
        stats_.cached_bytes += size;
        return;
      }
    }
    std::free(ptr);
  }

  Device device() const override { return Device::cpu(); }

  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
    if (stats_.cached_bytes > limit_) release_locked();
  }
  size_t limit() {
    std::lock_guard<std::mutex> lock(mutex_);
    return limit_;
  }
  CpuCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    release_locked();
  }

 private:
  void release_locked() {
    for (auto& [size, blocks] : free_)
      for (void* ptr : blocks) {
        ECH_UNPOISON(ptr, size);
        std::free(ptr);
      }
    free_.clear();
    stats_.cached_bytes = 0;
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t limit_ = default_limit();
  CpuCacheStats stats_;
};

CachingCpuAllocator& caching_allocator() {
  // Never destroyed: tensors in static objects may free memory during exit.
  static auto* instance = new CachingCpuAllocator();
  return *instance;
}

}  // namespace

Allocator* cpu_allocator() {
  return &caching_allocator();
}

size_t cpu_cache_size_class(size_t nbytes) {
  if (nbytes <= 4096) return (nbytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  const size_t step = std::bit_floor(nbytes) / 8;  // >= 512: a multiple of the alignment
  return (nbytes + step - 1) / step * step;
}

void set_cpu_cache_limit(size_t bytes) {
  caching_allocator().set_limit(bytes);
}
size_t cpu_cache_limit() {
  return caching_allocator().limit();
}
CpuCacheStats cpu_cache_stats() {
  return caching_allocator().stats();
}
void empty_cpu_cache() {
  caching_allocator().release();
}

}  // namespace echelon
