// Per-channel reductions over an (N, C, S) tensor as 2-D grids: blockIdx.y is the channel,
// blockIdx.x one of `chunks` equal ranges of that channel's N*S values. Why: one block per
// channel leaves most of the GPU idle when C is 6..64 (LeNet, ResNet-20), so each channel is
// split into chunks whose partial results a second pass combines in a FIXED order (chunk 0, 1,
// ...): deterministic, unlike atomics. Used by batch norm (norm.cu) and the conv bias gradient
// (conv.cu).
// Why vectors and an unrolled walk: a bandwidth kernel needs ~40 KB of loads in flight per SM
// (latency x bandwidth); one dependent 4-byte load per thread per step left the H200 at
// 0.39-0.55 of a copy (bench/RESULTS.md, P3). When S % 4 == 0 and every pointer is 16-byte
// aligned, 4 consecutive values of a channel lie in one plane, so the kernels walk (N, C, S/4)
// float4 units exactly as they walk floats (ChannelVec<4>); for_chunk issues kChannelUnroll of
// them per thread before using any. Otherwise the same code runs on floats (ChannelVec<1>).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

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
#if ECHELON_CUDA_SIM
// Few blocks per channel so that test-sized tensors also get chunks longer than a block's
// unrolled step (every unrolled load live, threads looping); tests reach > 32 chunks with C = 1.
inline constexpr int64_t kTargetBlocks = 64;
#else
// Several waves on a 132-SM H200 (~5 at the float4 passes' 3 resident blocks per SM): with
// ~1.5 waves, as 1024 blocks gave, the half-empty last wave cost up to a quarter of the time.
inline constexpr int64_t kTargetBlocks = 2048;
#endif
inline constexpr int kMaxChunks = 256;
inline constexpr int kChannelVec = 4;  // floats per 16-byte vector; chunk lengths are multiples

inline ChannelChunks channel_chunks(const NormArgs& a) {
  ChannelChunks cc;
  cc.count = a.n * a.spatial;
  const int64_t want = (kTargetBlocks + a.c - 1) / std::max<int64_t>(a.c, 1);
  const int64_t most = std::max<int64_t>(cc.count / kMinChunk, 1);
  const int64_t chunks = std::clamp<int64_t>(want, 1, std::min<int64_t>(most, kMaxChunks));
  cc.chunk_len = std::max<int64_t>((cc.count + chunks - 1) / chunks, 1);
  cc.chunk_len = (cc.chunk_len + kChannelVec - 1) / kChannelVec * kChannelVec;  // vector chunks
  cc.chunks = static_cast<int>(std::max<int64_t>((cc.count + cc.chunk_len - 1) / cc.chunk_len, 1));
  return cc;
}

// Whether the channel kernels may walk float4 units: S % 4 == 0 (a vector never crosses a
// plane; chunk lengths are multiples of 4) and every pointer (null: unused) 16-byte aligned.
inline bool channel_vectorisable(const NormArgs& a, std::initializer_list<const void*> pointers) {
  if (a.spatial % kChannelVec != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % (kChannelVec * sizeof(float)) != 0) return false;
  return true;
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

inline constexpr int kChannelUnroll = 4;  // vectors (or floats) in flight per thread and step

// W floats as one load: W = 4 a float4 (16 bytes), W = 1 a float.
template <int W>
struct ChannelVec {
  using type = std::conditional_t<W == 4, float4, float>;
  __device__ static type load(const float* p, int64_t at) {
    return reinterpret_cast<const type*>(p)[at];
  }
  __device__ static void store(float* p, int64_t at, type v) { reinterpret_cast<type*>(p)[at] = v; }
};
__device__ __forceinline__ float lane_of(float v, int) {
  return v;
}
__device__ __forceinline__ float lane_of(const float4& v, int k) {
  return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w));
}
__device__ __forceinline__ void set_lane(float& v, int, float x) {
  v = x;
}
__device__ __forceinline__ void set_lane(float4& v, int k, float x) {
  (k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w))) = x;
}

// This thread's share of its chunk of channel c in units of W values (offsets into the storage
// seen as (N, C, S / W) W-vectors): body(at, live) gets kChannelUnroll offsets at once, live[k]
// false past the chunk's end, so it can issue all their loads before it uses one.
template <int W, typename Body>
__device__ __forceinline__ void for_chunk(const NormArgs& a, const ChannelChunks& cc, int64_t c,
                                          Body&& body) {
  const NormArgs units{a.n, a.c, a.spatial / W};
  const int64_t end = chunk_end(cc) / W;
  ChannelWalk w(units, c, chunk_begin(cc) / W + threadIdx.x, blockDim.x);
  while (w.i < end) {
    int64_t at[kChannelUnroll];
    bool live[kChannelUnroll];
#pragma unroll
    for (int k = 0; k < kChannelUnroll; ++k) {
      live[k] = w.i < end;
      at[k] = w.offset();
      w.advance();
    }
    body(at, live);
  }
}

// Offset of value i of channel c (the first of a chunk: a per-chunk shift).
__device__ inline int64_t channel_offset(const NormArgs& a, int64_t c, int64_t i) {
  const int64_t s = max(a.spatial, int64_t{1});
  return (i / s * a.c + c) * a.spatial + i % s;
}
#endif

}  // namespace echelon::cuda
