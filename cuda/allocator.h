// The CUDA caching allocator: cudaMalloc is slow and synchronizing, so freed blocks are kept in
// size-class bins per stream and reused. Blocks freed by one stream are reused only by the same
// stream, so no cross-stream ordering is needed; empty_cache() returns everything to the driver.
// An allocation that fails even after emptying the cache throws an error stating the requested
// size and these statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

namespace echelon::cuda {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live tensors
  size_t reserved_bytes = 0;        // obtained from cudaMalloc (live + cached)
  size_t peak_allocated_bytes = 0;  // since start or reset_peak()
  size_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;          // allocate() calls
  uint64_t num_cuda_mallocs = 0;    // of which reached cudaMalloc (cache misses)
  std::string to_string() const;
};

AllocatorStats allocator_stats(int device);
void reset_peak_stats(int device);
void empty_cache(int device);

// Raw interface used by Storage (tensor/storage.h) and by kernels that need scratch space.
void* device_malloc(int device, size_t nbytes, cudaStream_t stream);
void device_free(int device, void* ptr);

// Pinned host memory (cudaHostAlloc), cached as well.
void* pinned_malloc(size_t nbytes);
void pinned_free(void* ptr);

}  // namespace echelon::cuda
