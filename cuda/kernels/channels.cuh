// Per-channel reductions over an (N, C, S) tensor as 2-D grids: blockIdx.y is the channel,
// blockIdx.x one of `chunks` equal ranges of that channel's N*S values. Why: one block per
// channel leaves most of the GPU idle when C is 6..64 (LeNet, ResNet-20), so each channel is
// split into chunks whose partial results a second pass combines in a FIXED order (chunk 0, 1,
// ...): deterministic, unlike atomics. Used by batch norm (norm.cu) and the conv bias gradient
// (conv.cu).
#pragma once

#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/check.h>
#include <echelon/kernels/norm.h>

namespace echelon::cuda {

// How one channel's count = N*S values are cut: chunk k is [k * chunk_len, min(count, ...)).
struct ChannelChunks {
  int64_t count = 0, chunk_len = 1;
  int chunks = 1;
};

#if ECHELON_CUDA_SIM
// Small chunks so that test-sized tensors get several chunks per channel (the second pass runs).
inline constexpr int64_t kMinChunk = 24;
#else
inline constexpr int64_t kMinChunk = 2048;  // values per block at the least: amortises the pass
#endif
inline constexpr int64_t kTargetBlocks = 1024;  // ~8 blocks per SM on a 132-SM H200
inline constexpr int kMaxChunks = 128;

inline ChannelChunks channel_chunks(const NormArgs& a) {
  ChannelChunks cc;
  cc.count = a.n * a.spatial;
  const int64_t want = (kTargetBlocks + a.c - 1) / std::max<int64_t>(a.c, 1);
  const int64_t most = std::max<int64_t>(cc.count / kMinChunk, 1);
  const int64_t chunks = std::clamp<int64_t>(want, 1, std::min<int64_t>(most, kMaxChunks));
  cc.chunk_len = std::max<int64_t>((cc.count + chunks - 1) / chunks, 1);
  cc.chunks = static_cast<int>(std::max<int64_t>((cc.count + cc.chunk_len - 1) / cc.chunk_len, 1));
  return cc;
}

inline dim3 channel_grid(const ChannelChunks& cc, int64_t channels) {
  ECH_CHECK(channels <= 65535, "per-channel kernels support at most 65535 channels, got ",
            channels);
  return dim3(static_cast<unsigned>(cc.chunks), static_cast<unsigned>(channels));
}

// Scratch device memory for the partial results, from the caching allocator of the current
// device; freed on scope exit (safe after the enqueue: reuse is on the same stream).
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t stream) {
    ECH_CUDA_CHECK(cudaGetDevice(&device_));
    data_ = device_malloc(device_, std::max<size_t>(bytes, 1), stream);
  }
  ~Scratch() { device_free(device_, data_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  int device_ = 0;
  void* data_ = nullptr;
};

#if defined(__CUDACC__) || ECHELON_CUDA_SIM
// Walks the values i = begin, begin + step, ... of channel c in (N, C, S) storage and yields
// their offsets (n * C + c) * S + s without a division per value: (n, s) advance by (step / S,
// step % S) with one carry.
struct ChannelWalk {
  int64_t i, n, s, step, step_n, step_s, base_c, plane_stride, spatial;
  __device__ ChannelWalk(const NormArgs& a, int64_t c, int64_t begin, int64_t step_)
      : i(begin),
        n(begin / max(a.spatial, int64_t{1})),
        s(begin % max(a.spatial, int64_t{1})),
        step(step_),
        step_n(step_ / max(a.spatial, int64_t{1})),
        step_s(step_ % max(a.spatial, int64_t{1})),
        base_c(c * a.spatial),
        plane_stride(a.c * a.spatial),
        spatial(a.spatial) {}
  __device__ int64_t offset() const { return n * plane_stride + base_c + s; }
  __device__ void advance() {
    i += step;
    n += step_n;
    s += step_s;
    if (s >= spatial) {
      s -= spatial;
      ++n;
    }
  }
};

// This block's chunk of its channel: [begin, end).
__device__ inline int64_t chunk_begin(const ChannelChunks& cc) {
  return static_cast<int64_t>(blockIdx.x) * cc.chunk_len;
}
__device__ inline int64_t chunk_end(const ChannelChunks& cc) {
  return min(chunk_begin(cc) + cc.chunk_len, cc.count);
}
#endif

}  // namespace echelon::cuda
