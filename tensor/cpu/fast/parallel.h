// The persistent thread pool of the fast CPU path (tensor/cpu/fast). The naive twins never use it.
//
// `--threads N` sizes it (ops::set_cpu_threads): N-1 workers plus the calling thread. OpenBLAS is
// then kept at one thread and the fast path splits its GEMMs itself, so exactly one pool runs on
// the cores (two pools that both spin-wait on a 2-core machine slow each other down).
//
// parallel_for runs inline (no threads touched) when the pool has one thread, when the range is
// one chunk, when called from inside a pool task (no nesting), and when another thread holds the
// pool (e.g. two pipeline stages calling ops at once): correctness never depends on the pool.
#pragma once

#include <cstdint>
#include <functional>

namespace echelon::cpu::fast {

// Threads of the fast path, the caller included; values < 1 mean 1. Process-wide.
void set_num_threads(int threads);
int num_threads();

// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (except
// when n < grain), and returns when all have run. With one thread the range is one chunk; with
// T > 1 threads the chunks are guided (each 1/(2T) of what is left, at least the grain and n/64,
// so they shrink towards the end and the threads finish together), claimed as the threads become
// free (a preempted thread delays an op by one chunk, not by a 1/T share). A function of
// (n, grain, T) only; a caller that needs at most one chunk per thread passes grain = ceil(n / T).
// The first exception a chunk throws is rethrown here after every chunk has finished.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// The number of chunks parallel_for(n, grain, ...) would use (for per-chunk scratch buffers).
int64_t chunk_count(int64_t n, int64_t grain);
// Chunk `index` of chunk_count(n, grain) chunks: [*begin, *end).
void chunk_range(int64_t n, int64_t chunks, int64_t index, int64_t* begin, int64_t* end);

// Like parallel_for, but fn(chunk, begin, end) also receives the chunk's index in
// [0, chunk_count(n, grain)): per-chunk partial results (e.g. a weight gradient per chunk, summed
// afterwards in chunk order, so results do not depend on thread timing; they do depend on the
// thread count, which sets the chunks).
void parallel_chunks(int64_t n, int64_t grain,
                     const std::function<void(int64_t, int64_t, int64_t)>& fn);

}  // namespace echelon::cpu::fast
