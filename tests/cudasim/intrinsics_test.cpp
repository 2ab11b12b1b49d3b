// The emulator's device language, intrinsic by intrinsic, each under every thread order: warp
// shuffles (all four, with sub-warp widths), votes, __syncwarp, barriers and their counting
// variants, static and dynamic shared memory, multi-dimensional coordinates, atomics, __ldg and
// the fast-math intrinsics, and cub::BlockReduce.
#include <cmath>
#include <numeric>

#include <cub/block/block_reduce.cuh>

#include "tests/cudasim/support.h"

using namespace cudasim_test;

namespace {

constexpr unsigned kFull = 0xffffffffu;

__global__ void shuffle_kernel(int width, int* idx, int* up, int* down, int* xr, double* dbl) {
  const int t = threadIdx.x;
  idx[t] = __shfl_sync(kFull, t * 10, 3, width);  // every segment reads its lane 3
  up[t] = __shfl_up_sync(kFull, t, 2, width);
  down[t] = __shfl_down_sync(kFull, t, 5, width);
  xr[t] = __shfl_xor_sync(kFull, t, 1, width);
  dbl[t] = __shfl_down_sync(kFull, t + 0.5, 1);  // 8-byte type
}

__global__ void vote_kernel(unsigned* ballot, int* any, int* all, int* all_true) {
  const int t = threadIdx.x;
  ballot[t] = __ballot_sync(kFull, t % 3 == 0);
  any[t] = __any_sync(kFull, t == 17);
  all[t] = __all_sync(kFull, t < 31);
  all_true[t] = __all_sync(kFull, t >= 0);
  __syncwarp();
}

// Lanes 0..15 and 16..31 shuffle separately, with half masks.
__global__ void half_mask_kernel(int* out) {
  const int lane = threadIdx.x;
  const unsigned mask = lane < 16 ? 0x0000ffffu : 0xffff0000u;
  int v = lane;
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_down_sync(mask, v, offset, 16);
  __syncwarp(mask);
  out[lane] = v;
}

// Block of (8, 4, 2): each thread writes its coordinates; then a shared-memory reversal with the
// barrier counting variants.
__global__ void coordinates_kernel(int* coords, int* reversed, int* counts) {
  __shared__ int tile[64];
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * blockIdx.y;
  const int g = b * 64 + t;
  coords[g * 4 + 0] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
  coords[g * 4 + 1] = blockIdx.x + 10 * blockIdx.y;
  coords[g * 4 + 2] = blockDim.x + 10 * blockDim.y + 100 * blockDim.z;
  coords[g * 4 + 3] = gridDim.x + 10 * gridDim.y + 100 * gridDim.z;
  tile[t] = g;
  const int count = __syncthreads_count(t % 4 == 0);
  const int all = __syncthreads_and(t < 64);
  const int any = __syncthreads_or(t == 63);
  reversed[g] = tile[63 - t];
  if (t == 0) {
    counts[b * 3 + 0] = count;
    counts[b * 3 + 1] = all;
    counts[b * 3 + 2] = any;
  }
}

__global__ void dynamic_shared_kernel(const float* in, float* out, float* untouched) {
  ECH_DYNAMIC_SHARED(float, tile);
  const int t = threadIdx.x;
  if (blockIdx.x == 0 && t == 0) untouched[0] = tile[blockDim.x];  // past what we write: NaN
  tile[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
}

__global__ void atomics_kernel(float* fsum, int* isum, unsigned long long* count, int* lo, int* hi,
                               int* cas, double* dsum, int* sub, int* exch) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(fsum, 0.5f);
  atomicAdd(isum, t);
  atomicAdd(count, 1ull);
  atomicMin(lo, 1000 - t);
  atomicMax(hi, t);
  atomicAdd(dsum, 0.25);
  atomicSub(sub, 2);
  atomicExch(exch, 7);
  // Each thread increments *cas once through a CAS loop.
  int old = *cas, assumed;
  do {
    assumed = old;
    old = atomicCAS(cas, assumed, assumed + 1);
  } while (old != assumed);
  __threadfence();
  __threadfence_block();
}

__global__ void math_kernel(const float* x, float* out) {
  const float v = __ldg(x + threadIdx.x);
  float* o = out + threadIdx.x * 26;
  o[0] = __expf(v);
  o[1] = __logf(v);
  o[2] = __sinf(v);
  o[3] = __cosf(v);
  o[4] = __powf(v, 1.5f);
  o[5] = __fdividef(1.0f, v);
  o[6] = rsqrtf(v);
  o[7] = static_cast<float>(rsqrt(static_cast<double>(v)));
  o[8] = fminf(v, 1.0f);
  o[9] = fmaxf(v, 1.0f);
  o[10] = __saturatef(v - 1.0f);
  o[11] = __fmaf_rn(v, 2.0f, 1.0f);
  o[12] = static_cast<float>(__float2int_rn(v * 3.0f));
  o[13] = static_cast<float>(max(static_cast<int64_t>(threadIdx.x), int64_t{2}));
  o[14] = static_cast<float>(min(static_cast<int>(threadIdx.x), 1));
  o[15] = static_cast<float>(__popc(threadIdx.x) + __ffs(static_cast<int>(threadIdx.x)));
  o[16] = __exp10f(v);
  o[17] = __log2f(v);
  o[18] = __log10f(v);
  o[19] = __tanf(v);
  o[20] = __frcp_rn(v);
  o[21] = __fsqrt_rn(v);
  o[22] = __fadd_rn(v, 0.25f);
  o[23] = __fmul_rn(v, 3.0f);
  o[24] = static_cast<float>(__popcll(0xF0F0ull << threadIdx.x));
  o[25] = static_cast<float>(__clz(static_cast<int>(threadIdx.x)));
}

template <int kThreads>
__global__ void block_reduce_kernel(const double* in, double* sum, double* max) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const double v = in[blockIdx.x * kThreads + threadIdx.x];
  const double s = Reduce(temp).Sum(v);
  __syncthreads();  // temp is reused
  const double m = Reduce(temp).Reduce(v, [](double a, double b) { return a > b ? a : b; });
  if (threadIdx.x == 0) {
    sum[blockIdx.x] = s;
    max[blockIdx.x] = m;
  }
}

}  // namespace

TEST_SUITE("cudasim_intrinsics") {
  TEST_CASE("shuffles: idx, up, down, xor with widths 32, 16 and 8, and an 8-byte type") {
    for (const auto order : kOrders) {
      OrderScope scope(order);
      for (const int width : {32, 16, 8}) {
        CAPTURE(width);
        DeviceBuffer<int> idx(64), up(64), down(64), xr(64);
        DeviceBuffer<double> dbl(64);
        ECH_LAUNCH(1, 64, 0, nullptr, shuffle_kernel)
        (width, idx.get(), up.get(), down.get(), xr.get(), dbl.get());
        REQUIRE(cudaGetLastError() == cudaSuccess);
        const auto i = idx.host(), u = up.host(), d = down.host(), x = xr.host();
        const auto f = dbl.host();
        for (int t = 0; t < 64; ++t) {
          const int lane = t % 32, seg = lane / width * width, warp = t / 32 * 32;
          CHECK(i[t] == (warp + seg + 3) * 10);
          CHECK(u[t] == (lane - seg >= 2 ? t - 2 : t));
          CHECK(d[t] == (lane - seg + 5 < width ? t + 5 : t));
          CHECK(x[t] == (t ^ 1));
          CHECK(f[t] == (lane < 31 ? t + 1.5 : t + 0.5));
        }
      }
    }
  }

  TEST_CASE("votes: ballot, any, all, and __syncwarp") {
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<unsigned> ballot(32);
      DeviceBuffer<int> any(32), all(32), all_true(32);
      ECH_LAUNCH(1, 32, 0, nullptr, vote_kernel)
      (ballot.get(), any.get(), all.get(), all_true.get());
      unsigned expected = 0;
      for (int t = 0; t < 32; t += 3) expected |= 1u << t;
      for (const unsigned b : ballot.host()) CHECK(b == expected);
      for (const int a : any.host()) CHECK(a == 1);
      for (const int a : all.host()) CHECK(a == 0);
      for (const int a : all_true.host()) CHECK(a == 1);
    }
  }

  TEST_CASE("half-warp masks shuffle independently") {
    DeviceBuffer<int> out(32);
    ECH_LAUNCH(1, 32, 0, nullptr, half_mask_kernel)(out.get());
    const auto v = out.host();
    CHECK(v[0] == 120);   // 0 + 1 + ... + 15
    CHECK(v[16] == 376);  // 16 + ... + 31
  }

  TEST_CASE("3-D blocks, 2-D grids, shared memory and the counting barriers") {
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<int> coords(6 * 64 * 4), reversed(6 * 64), counts(6 * 3);
      ECH_LAUNCH(dim3(3, 2), dim3(8, 4, 2), 0, nullptr, coordinates_kernel)
      (coords.get(), reversed.get(), counts.get());
      const auto c = coords.host(), r = reversed.host(), n = counts.host();
      for (int b = 0; b < 6; ++b) {
        CHECK(n[b * 3 + 0] == 16);
        CHECK(n[b * 3 + 1] == 1);
        CHECK(n[b * 3 + 2] == 1);
        for (int t = 0; t < 64; ++t) {
          const int g = b * 64 + t;
          CHECK(c[g * 4 + 0] == t % 8 + 10 * (t / 8 % 4) + 100 * (t / 32));
          CHECK(c[g * 4 + 1] == b % 3 + 10 * (b / 3));
          CHECK(c[g * 4 + 2] == 8 + 40 + 200);
          CHECK(c[g * 4 + 3] == 3 + 20 + 100);
          CHECK(r[g] == b * 64 + 63 - t);
        }
      }
    }
  }

  TEST_CASE("dynamic shared memory is per block and NaN-filled") {
    std::vector<float> in(3 * 40);
    std::iota(in.begin(), in.end(), 0.0f);
    DeviceBuffer<float> x(in), y(in.size()), untouched(1);
    ECH_LAUNCH(3, 40, 41 * sizeof(float), nullptr, dynamic_shared_kernel)
    (x.get(), y.get(), untouched.get());
    const auto out = y.host();
    for (int b = 0; b < 3; ++b)
      for (int t = 0; t < 40; ++t) CHECK(out[b * 40 + t] == in[b * 40 + 39 - t]);
    CHECK(std::isnan(untouched.host()[0]));
  }

  TEST_CASE("atomics: add (float, int, u64, double), min, max, CAS") {
    DeviceBuffer<float> fsum(std::vector<float>{0.0f});
    DeviceBuffer<int> isum(std::vector<int>{0}), lo(std::vector<int>{5000}),
        hi(std::vector<int>{-1}), cas(std::vector<int>{0});
    DeviceBuffer<unsigned long long> count(std::vector<unsigned long long>{0});
    DeviceBuffer<double> dsum(std::vector<double>{0.0});
    DeviceBuffer<int> sub(std::vector<int>{1000}), exch(std::vector<int>{-1});
    ECH_LAUNCH(4, 100, 0, nullptr, atomics_kernel)
    (fsum.get(), isum.get(), count.get(), lo.get(), hi.get(), cas.get(), dsum.get(), sub.get(),
     exch.get());
    CHECK(fsum.host()[0] == 200.0f);
    CHECK(isum.host()[0] == 399 * 400 / 2);
    CHECK(count.host()[0] == 400u);
    CHECK(lo.host()[0] == 1000 - 399);
    CHECK(hi.host()[0] == 399);
    CHECK(cas.host()[0] == 400);
    CHECK(dsum.host()[0] == 100.0);
    CHECK(sub.host()[0] == 200);
    CHECK(exch.host()[0] == 7);
  }

  TEST_CASE("__ldg and the fast-math intrinsics match their libm definitions") {
    const std::vector<float> in{0.5f, 1.0f, 2.5f, 7.0f};
    DeviceBuffer<float> x(in), out(in.size() * 26);
    ECH_LAUNCH(1, 4, 0, nullptr, math_kernel)(x.get(), out.get());
    const auto o = out.host();
    for (size_t t = 0; t < in.size(); ++t) {
      const float v = in[t];
      const float* r = o.data() + t * 26;
      CHECK(r[0] == doctest::Approx(std::exp(v)));
      CHECK(r[1] == doctest::Approx(std::log(v)));
      CHECK(r[2] == doctest::Approx(std::sin(v)));
      CHECK(r[3] == doctest::Approx(std::cos(v)));
      CHECK(r[4] == doctest::Approx(std::pow(v, 1.5f)));
      CHECK(r[5] == doctest::Approx(1.0f / v));
      CHECK(r[6] == doctest::Approx(1.0f / std::sqrt(v)));
      CHECK(r[7] == doctest::Approx(1.0f / std::sqrt(v)));
      CHECK(r[8] == std::fmin(v, 1.0f));
      CHECK(r[9] == std::fmax(v, 1.0f));
      CHECK(r[10] == std::clamp(v - 1.0f, 0.0f, 1.0f));
      CHECK(r[11] == v * 2.0f + 1.0f);
      CHECK(r[12] == std::nearbyint(v * 3.0f));
      CHECK(r[13] == std::max<float>(static_cast<float>(t), 2.0f));
      CHECK(r[14] == std::min<float>(static_cast<float>(t), 1.0f));
      CHECK(r[15] == static_cast<float>(__builtin_popcount(static_cast<unsigned>(t)) +
                                        __builtin_ffs(static_cast<int>(t))));
      CHECK(r[16] == doctest::Approx(std::pow(10.0f, v)));
      CHECK(r[17] == doctest::Approx(std::log2(v)));
      CHECK(r[18] == doctest::Approx(std::log10(v)));
      CHECK(r[19] == doctest::Approx(std::tan(v)));
      CHECK(r[20] == 1.0f / v);
      CHECK(r[21] == std::sqrt(v));
      CHECK(r[22] == v + 0.25f);
      CHECK(r[23] == v * 3.0f);
      CHECK(r[24] == 8.0f);
      CHECK(r[25] == static_cast<float>(t == 0 ? 32 : __builtin_clz(static_cast<unsigned>(t))));
    }
  }

  TEST_CASE("cub::BlockReduce: sum and custom reduction, aggregate in thread 0") {
    for (const auto order : kOrders) {
      OrderScope scope(order);
      std::vector<double> in(3 * 128);
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>((i * 37) % 101) - 50.0;
      DeviceBuffer<double> x(in), sum(3), max(3);
      ECH_LAUNCH(3, 128, 0, nullptr, block_reduce_kernel<128>)(x.get(), sum.get(), max.get());
      const auto s = sum.host(), m = max.host();
      for (int b = 0; b < 3; ++b) {
        const auto first = in.begin() + b * 128, last = first + 128;
        CHECK(s[b] == std::accumulate(first, last, 0.0));
        CHECK(m[b] == *std::max_element(first, last));
      }
    }
  }
}
