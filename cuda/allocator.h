// The CUDA caching allocator: cudaMalloc is slow and synchronizing, so freed blocks are kept in
// size-class bins per stream and reused. A block freed is reused only by the stream it was
// allocated on, so work on that stream needs no ordering. A block that other streams used too
// (record_stream, or the stream current when a tensor dies) becomes reusable only once the work
// queued on those streams up to the free has completed (an event per stream, like PyTorch's
// record_stream). empty_cache() returns everything to the driver.
// CUDA graphs: while a capture pool is open for a stream, that stream's allocations come from a
// private pool that outlives the capture (PyTorch's design): a graph's replays read and write
// the very addresses captured, so none of them may be handed to other work while the graph
// lives. Blocks freed during the capture stay in the pool too.
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
  uint64_t num_allocs = 0;        // allocate() calls
  uint64_t num_cuda_mallocs = 0;  // of which reached cudaMalloc (cache misses)
  std::string to_string() const;
};

AllocatorStats allocator_stats(int device);
void reset_peak_stats(int device);
void empty_cache(int device);

// Raw interface used by Storage (tensor/storage.h) and by kernels that need scratch space.
void* device_malloc(int device, size_t nbytes, cudaStream_t stream);
void device_free(int device, void* ptr);
// Frees a block whose last user may be `last_stream` (the freeing thread's current stream): if
// that is not the allocation stream, reuse waits for `last_stream`'s queued work. Never throws
// for CUDA errors (it runs in destructors).
void device_free(int device, void* ptr, cudaStream_t last_stream);
// Marks the block that device_malloc returned as `ptr` as used on `stream` (a stream other than
// its allocation stream, e.g. a pipeline transport's receiver): see the header comment.
void record_stream(int device, void* ptr, cudaStream_t stream);
// Called by cuda::Stream before it destroys `stream`: synchronizes it, then forgets it (its free
// blocks become reusable by every stream; its handle may be recycled for a new stream).
void release_stream(int device, cudaStream_t stream) noexcept;

// A private pool for the CUDA graph about to be captured on `stream` (cudaStreamBeginCapture
// comes after this call): until end_capture_pool, device_malloc on `stream` takes its blocks from
// the pool (cudaMalloc in relaxed capture mode when the pool has none), and every block freed on
// the device goes into the pool, since the captured work may still name it. One pool may be open
// per device. The id is never 0.
uint64_t begin_capture_pool(int device, cudaStream_t stream);
// Ends routing (after cudaStreamEndCapture); the pool keeps its blocks.
void end_capture_pool(int device, uint64_t pool);
// The graph is gone: synchronises `stream` (the replays' stream), then the pool's free blocks
// become ordinary cached blocks usable by any stream, and its live ones become so when freed.
void release_capture_pool(int device, uint64_t pool, cudaStream_t stream) noexcept;
// Blocks (free, and free + live) a pool holds: tests and statistics.
struct CapturePoolStats {
  size_t free_blocks = 0, blocks = 0;
};
CapturePoolStats capture_pool_stats(int device, uint64_t pool);

// Pinned host memory (cudaHostAlloc), cached as well. A block is reused only after every
// asynchronous copy recorded on it with pinned_record_stream has completed.
void* pinned_malloc(size_t nbytes);
void pinned_free(void* ptr);
// `ptr` (returned by pinned_malloc) is read or written by work just queued on `stream`, a stream
// of the current device.
void pinned_record_stream(void* ptr, cudaStream_t stream);

}  // namespace echelon::cuda
