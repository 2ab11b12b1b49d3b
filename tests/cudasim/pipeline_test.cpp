// cp.async (<cuda_pipeline.h>): a copy's destination is undefined (NaN) from the copy until a
// wait lands its group, groups land oldest first, zfill zeroes the tail, a multi-stage pipeline
// that waits is right in every order and one that skips a wait reads NaN; bad sizes, alignment
// and sources fail the launch naming the call.
#include <cmath>
#include <cstdint>
#include <numeric>

#include <cuda_pipeline.h>

#include "tests/cudasim/support.h"

using namespace cudasim_test;

namespace {

// Thread t commits three groups of one copy each into stage[g][t]: a 4-byte, an 8-byte (4 bytes
// read, 4 zero-filled) and a 16-byte copy of in[(g * 64 + t) * 4 ...], and records stage[g][t]
// at three points: seen[t][point][g][e]. Point 0: before any wait; 1: after wait_prior(2) (the
// oldest group landed); 2: after wait_prior(0).
__global__ void groups_kernel(const float* in, float* seen) {
  __shared__ __align__(16) float stage[3][64][4];
  const int t = threadIdx.x;
  const float* src = in + t * 4;
  __pipeline_memcpy_async(&stage[0][t][0], src, 4);
  __pipeline_commit();
  __pipeline_memcpy_async(&stage[1][t][0], src + 64 * 4, 8, 4);  // 4 bytes read, 4 zeroed
  __pipeline_commit();
  __pipeline_memcpy_async(&stage[2][t][0], src + 2 * 64 * 4, 16);
  __pipeline_commit();
  const auto record = [&](int point) {
    for (int g = 0; g < 3; ++g)
      for (int e = 0; e < 4; ++e) seen[((t * 3 + point) * 3 + g) * 4 + e] = stage[g][t][e];
  };
  record(0);
  __pipeline_wait_prior(2);  // the oldest group has landed
  record(1);
  __pipeline_wait_prior(0);
  record(2);
}

// Sums in[] (blocks of 64 x 4 floats, `chunks` of them) through a 3-stage ring: chunk c is copied
// two chunks ahead into stage c % 3; each thread then sums its neighbour's column (so a stage is
// read by threads that did not copy it: the barrier after the wait matters). skip_wait leaves
// out the wait, as a buggy kernel would.
__global__ void ring_kernel(const float* in, int chunks, bool skip_wait, float* out) {
  __shared__ __align__(16) float stage[3][64][4];
  const int t = threadIdx.x;
  const auto issue = [&](int c) {
    if (c < chunks) __pipeline_memcpy_async(&stage[c % 3][t][0], in + (c * 64 + t) * 4, 16);
    __pipeline_commit();
  };
  issue(0);
  issue(1);
  float sum = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    if (!skip_wait) __pipeline_wait_prior(1);
    __syncthreads();
    issue(c + 2);
    const float* mine = stage[c % 3][(t + 1) % 64];
    sum += mine[0] + mine[1] + mine[2] + mine[3];
  }
  out[t] = sum;
}

// A gather by 4-byte copies, as the conv's gather tiles stage (gemm_tile.cuh, AsyncGather):
// thread t copies in[t / 2] into stage[t] when t is even, and zero-fills stage[t] (src-size 0,
// from in's base) when odd; stage[t] recorded before the wait (seen[t]) and after
// (seen[64 + t]); the neighbour's element too (seen[128 + t]) after wait and barrier.
__global__ void gather_kernel(const float* in, float* seen) {
  __shared__ float stage[64];
  const int t = threadIdx.x;
  const bool inside = t % 2 == 0;
  __pipeline_memcpy_async(&stage[t], inside ? in + t / 2 : in, 4, inside ? 0 : 4);
  __pipeline_commit();
  seen[t] = stage[t];
  __pipeline_wait_prior(0);
  seen[64 + t] = stage[t];
  __syncthreads();
  seen[128 + t] = stage[(t + 1) % 64];
}

__global__ void bad_copy_kernel(const float* in, int what, float* out) {
  __shared__ __align__(16) float stage[8];
  switch (what) {
    case 0:
      __pipeline_memcpy_async(stage, in + 1, 16);  // source not 16-byte aligned
      break;
    case 1:
      __pipeline_memcpy_async(stage, in, 12);  // no such size
      break;
    case 2:
      __pipeline_memcpy_async(stage, in + 4, 16);  // reads past the 4-float allocation
      break;
    case 3:
      __pipeline_memcpy_async(out, in, 16);  // destination in global memory
      break;
    default:
      __pipeline_memcpy_async(stage, in + 4, 16, 16);  // reads nothing: fine
      __pipeline_commit();
      __pipeline_wait_prior(0);
      out[0] = stage[0];
  }
}

}  // namespace

TEST_SUITE("cudasim_pipeline") {
  TEST_CASE("cp.async: NaN until waited for, groups land oldest first, zfill zeroes") {
    std::vector<float> in(3 * 64 * 4);
    std::iota(in.begin(), in.end(), 1.0f);
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<float> x(in), seen(64 * 3 * 3 * 4);
      ECH_LAUNCH(1, 64, 0, nullptr, groups_kernel)(x.get(), seen.get());
      REQUIRE(cudaGetLastError() == cudaSuccess);
      const auto s = seen.host();
      for (int t = 0; t < 64; ++t) {
        CAPTURE(t);
        const auto at = [&](int point, int g, int e) {
          return s[((t * 3 + point) * 3 + g) * 4 + e];
        };
        // The copied elements once landed (group 1's second float is zero-filled); a copy's
        // destination is its `size` bytes only: group 0 has 1 element, group 1 has 2.
        const auto landed = [&](int g, int e) {
          return g == 1 && e == 1 ? 0.0f : in[static_cast<size_t>(g * 64 * 4 + t * 4 + e)];
        };
        for (int g = 0; g < 3; ++g)
          for (int e = 0; e < (g == 0 ? 1 : g == 1 ? 2 : 4); ++e) {
            CHECK(std::isnan(at(0, g, e)));  // nothing landed before a wait
            const float after1 = at(1, g, e), after2 = at(2, g, e);
            if (g == 0)
              CHECK(after1 == landed(g, e));
            else
              CHECK(std::isnan(after1));  // the two newest groups may still be in flight
            CHECK(after2 == landed(g, e));
          }
      }
    }
  }

  TEST_CASE("a 3-stage ring is right in every order; without its wait it reads NaN") {
    constexpr int kChunks = 7;
    std::vector<float> in(kChunks * 64 * 4);
    std::iota(in.begin(), in.end(), 0.0f);
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<float> x(in), good(64), bad(64);
      ECH_LAUNCH(1, 64, 0, nullptr, ring_kernel)(x.get(), kChunks, false, good.get());
      ECH_LAUNCH(1, 64, 0, nullptr, ring_kernel)(x.get(), kChunks, true, bad.get());
      REQUIRE(cudaGetLastError() == cudaSuccess);
      const auto g = good.host(), b = bad.host();
      for (int t = 0; t < 64; ++t) {
        float expected = 0.0f;
        for (int c = 0; c < kChunks; ++c)
          for (int e = 0; e < 4; ++e)
            expected += in[static_cast<size_t>((c * 64 + (t + 1) % 64) * 4 + e)];
        CHECK(g[t] == expected);
        CHECK(std::isnan(b[t]));
      }
    }
  }

  TEST_CASE("4-byte gathers: zfill 4 reads nothing and lands zero; NaN until waited for") {
    // The source of a zero-filled copy is in's base: read by no one (its value is not 0).
    std::vector<float> in(32);
    std::iota(in.begin(), in.end(), 1.0f);
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<float> x(in), seen(3 * 64);
      ECH_LAUNCH(1, 64, 0, nullptr, gather_kernel)(x.get(), seen.get());
      REQUIRE(cudaGetLastError() == cudaSuccess);
      const auto s = seen.host();
      for (int t = 0; t < 64; ++t) {
        CAPTURE(t);
        const auto landed = [&](int u) {
          return u % 2 == 0 ? in[static_cast<size_t>(u / 2)] : 0.0f;
        };
        CHECK(std::isnan(s[t]));  // zero-filled ones too: nothing lands before the wait
        CHECK(s[64 + t] == landed(t));
        CHECK(s[128 + t] == landed((t + 1) % 64));
      }
    }
  }

  TEST_CASE("cp.async misuse fails the launch naming the call") {
    DeviceBuffer<float> x(std::vector<float>{1, 2, 3, 4}), out(4);
    const auto why = [&](int what) {
      return failure_of([&] {
        ECH_LAUNCH(1, 1, 0, nullptr, bad_copy_kernel)(x.get(), what, out.get());
      });
    };
    const std::string misaligned = why(0);
    CHECK(contains(misaligned, "__pipeline_memcpy_async at pipeline_test.cpp:"));
    CHECK(contains(misaligned, "not aligned to the copy's 16 bytes"));
    CHECK(contains(why(1), "size 12 (must be 4, 8 or 16)"));
    CHECK(contains(why(2), "not inside a device allocation"));
    CHECK(contains(why(3), "the destination is global memory"));
    CHECK(why(4).empty());
    CHECK(out.host()[0] == 0.0f);  // all 16 bytes zero-filled
  }
}
