// The emulated runtime: streams really run concurrently and in order, events order work across
// streams, the legacy default stream synchronises with blocking streams, memory starts as NaN,
// the cuBLAS stand-in follows the column-major definition, and the thread/block orders and the
// grid cap do what the docs say.
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <cublas_v2.h>

#include "tests/cudasim/support.h"

using namespace cudasim_test;

namespace {

// A host function that holds its stream until released (gives up after 10 s, so a bug in the
// emulator fails the test instead of hanging it).
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> passed{false};
  static void wait(void* self) {
    auto* gate = static_cast<Gate*>(self);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!gate->open.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    gate->passed = gate->open.load();
  }
  static void release(void* self) { static_cast<Gate*>(self)->open = true; }
};

__global__ void add_kernel(float* x, float v, int n) {
  for (int64_t i = echelon::cuda::grid_start(); i < n; i += echelon::cuda::grid_step()) x[i] += v;
}

__global__ void ticket_kernel(int* next, int* thread_ticket, int* block_ticket) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  thread_ticket[t] = atomicAdd(next, 1);
  if (threadIdx.x == 0) block_ticket[blockIdx.x] = atomicAdd(next + 1, 1);
}

// Each thread publishes its value in shared memory and reads its right neighbour's, with or
// without the barrier in between.
template <bool kBarrier>
__global__ void neighbour_kernel(const int* in, int* out) {
  __shared__ int tile[64];
  const int t = threadIdx.x;
  tile[t] = in[t];
  if (kBarrier) __syncthreads();
  out[t] = tile[(t + 1) % 64];
}

std::vector<float> gemm_reference(bool ta, bool tb, int m, int n, int k,
                                  const std::vector<float>& a, int lda, const std::vector<float>& b,
                                  int ldb) {
  std::vector<float> c(static_cast<size_t>(m) * n);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double acc = 0;
      for (int p = 0; p < k; ++p)
        acc +=
            double(ta ? a[i * lda + p] : a[p * lda + i]) * (tb ? b[p * ldb + j] : b[j * ldb + p]);
      c[static_cast<size_t>(j) * m + i] = static_cast<float>(acc);
    }
  return c;
}

}  // namespace

TEST_SUITE("cudasim_runtime") {
  TEST_CASE("events order two streams; queries see unfinished work") {
    cudaStream_t producer, consumer;
    REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
    cudaEvent_t done;
    REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
    CHECK(cudaEventQuery(done) == cudaSuccess);  // never recorded: complete
    DeviceBuffer<float> x(std::vector<float>(1000, 1.0f));
    Gate gate;
    cudaLaunchHostFunc(producer, &Gate::wait, &gate);
    ECH_LAUNCH(4, 64, 0, producer, add_kernel)(x.get(), 1.0f, 1000);
    cudaEventRecord(done, producer);
    cudaStreamWaitEvent(consumer, done, 0);
    ECH_LAUNCH(4, 64, 0, consumer, add_kernel)(x.get(), 10.0f, 1000);  // must see the +1
    CHECK(cudaEventQuery(done) == cudaErrorNotReady);
    CHECK(cudaStreamQuery(consumer) == cudaErrorNotReady);
    CHECK(cudaGetLastError() == cudaSuccess);  // NotReady is not an error
    gate.open = true;
    CHECK(cudaStreamSynchronize(consumer) == cudaSuccess);
    CHECK(gate.passed);
    CHECK(cudaEventQuery(done) == cudaSuccess);
    for (const float v : x.host()) REQUIRE(v == 12.0f);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, done, done) == cudaErrorInvalidResourceHandle);  // no timing
    cudaGetLastError();
    cudaEventDestroy(done);
    cudaStreamDestroy(producer);
    cudaStreamDestroy(consumer);
  }

  TEST_CASE("streams run concurrently: one releases the other") {
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    Gate gate;
    cudaLaunchHostFunc(a, &Gate::wait, &gate);
    cudaLaunchHostFunc(b, &Gate::release, &gate);  // runs while a is still blocked
    cudaStreamSynchronize(a);
    CHECK(gate.passed);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
  }

  TEST_CASE("timing events measure queued work") {
    cudaStream_t s;
    cudaStreamCreate(&s);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    cudaEventRecord(start, s);
    cudaLaunchHostFunc(
        s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }, nullptr);
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
    CHECK(ms >= 19.0f);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaStreamDestroy(s);
  }

  TEST_CASE("the legacy default stream waits for blocking streams, not for non-blocking ones") {
    cudaStream_t blocking, non_blocking;
    cudaStreamCreate(&blocking);
    cudaStreamCreateWithFlags(&non_blocking, cudaStreamNonBlocking);
    Gate gate, other;
    cudaLaunchHostFunc(blocking, &Gate::wait, &gate);
    std::atomic<int> legacy_ran{0};
    cudaLaunchHostFunc(
        nullptr, [](void* p) { ++*static_cast<std::atomic<int>*>(p); }, &legacy_ran);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(legacy_ran == 0);  // behind the blocked blocking stream
    cudaLaunchHostFunc(non_blocking, &Gate::wait, &other);
    cudaLaunchHostFunc(nullptr, &Gate::release, &other);  // legacy does not wait for non_blocking
    gate.open = true;
    cudaDeviceSynchronize();
    CHECK(legacy_ran == 1);
    CHECK(other.passed);
    cudaStreamDestroy(blocking);
    cudaStreamDestroy(non_blocking);
  }

  TEST_CASE("device memory starts as NaN (0xFF bytes); memset and memory info") {
    size_t free_before = 0, total = 0;
    REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
    DeviceBuffer<float> x(1000);
    size_t free_after = 0;
    cudaMemGetInfo(&free_after, &total);
    CHECK(free_before - free_after >= 4000);
    for (const float v : x.host()) REQUIRE(std::isnan(v));
    CHECK(cudaMemset(x.get(), 0, 400) == cudaSuccess);
    const auto v = x.host();
    CHECK(v[99] == 0.0f);
    CHECK(std::isnan(v[100]));
    void* pinned = nullptr;
    REQUIRE(cudaHostAlloc(&pinned, 64, cudaHostAllocPortable) == cudaSuccess);
    CHECK(cudaMemcpyAsync(pinned, x.get(), 64, cudaMemcpyDeviceToHost, nullptr) == cudaSuccess);
    cudaDeviceSynchronize();
    CHECK(static_cast<float*>(pinned)[0] == 0.0f);
    CHECK(cudaFreeHost(pinned) == cudaSuccess);
    void* host = nullptr;
    REQUIRE(cudaMallocHost(&host, 8) == cudaSuccess);
    CHECK(cudaFreeHost(host) == cudaSuccess);
    CHECK(cudaFreeHost(x.get()) == cudaErrorInvalidValue);  // device memory
    cudaGetLastError();
  }

  TEST_CASE("peer copies check the devices they name") {
    DeviceBuffer<float> a(std::vector<float>{1, 2, 3, 4}), b(4);
    CHECK(cudaMemcpyPeerAsync(b.get(), 0, a.get(), 0, 16, nullptr) == cudaSuccess);
    CHECK(b.host() == std::vector<float>{1, 2, 3, 4});
    CHECK(cudaMemcpyPeerAsync(b.get(), 1, a.get(), 0, 16, nullptr) == cudaErrorInvalidValue);
    CHECK(cudaMemcpyPeerAsync(b.get(), 0, a.get(), 0, 20, nullptr) == cudaErrorInvalidValue);
    cudaGetLastError();
  }

  TEST_CASE("peer access: never to itself, only between devices that exist") {
    int can = -1;
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 0) == cudaSuccess);
    CHECK(can == 0);
    CHECK(cudaDeviceCanAccessPeer(&can, 0, 64) == cudaErrorInvalidDevice);
    CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorInvalidDevice);  // device 0 is current
    CHECK(cudaDeviceEnablePeerAccess(64, 0) == cudaErrorInvalidDevice);
    cudaGetLastError();
  }

  TEST_CASE("cuBLAS stand-in: column-major SGEMM with every transpose, and its checks") {
    cublasHandle_t handle;
    REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    const int m = 5, n = 3, k = 7;
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        CAPTURE(ta);
        CAPTURE(tb);
        const int lda = (ta ? k : m) + 1, ldb = (tb ? n : k) + 2;
        std::vector<float> a(static_cast<size_t>(lda) * (ta ? m : k)),
            b(static_cast<size_t>(ldb) * (tb ? k : n));
        for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 11) - 5.0f;
        for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.5f;
        DeviceBuffer<float> da(a), db(b), dc(static_cast<size_t>(m) * n);
        const float alpha = 1.0f, beta = 0.0f;  // beta 0: C's NaN is never read
        REQUIRE(cublasSgemm(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                            m, n, k, &alpha, da.get(), lda, db.get(), ldb, &beta, dc.get(),
                            m) == CUBLAS_STATUS_SUCCESS);
        CHECK(dc.host() == gemm_reference(ta, tb, m, n, k, a, lda, b, ldb));
      }
    DeviceBuffer<float> small(8);
    const float one = 1.0f;
    CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, small.get(), 3, small.get(),
                      2, &one, small.get(), 4) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
    CHECK(failure_of([&] {
            CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, small.get(), 4,
                              small.get(), 4, &one, small.get(),
                              4) == CUBLAS_STATUS_EXECUTION_FAILED);
          }).find("reaches outside device memory") != std::string::npos);
    cudaStream_t s;
    cudaStreamCreate(&s);
    cublasSetStream(handle, s);
    cudaStream_t got = nullptr;
    cublasGetStream(handle, &got);
    CHECK(got == s);
    cublasDestroy(handle);
    cudaStreamDestroy(s);
  }

  TEST_CASE("thread and block orders: forward, reverse, random (reproducible per seed)") {
    const auto tickets = [](echelon::cudasim::Order order) {
      OrderScope scope(order);
      DeviceBuffer<int> next(std::vector<int>{0, 0}), threads(4 * 8), blocks(4);
      ECH_LAUNCH(4, 8, 0, nullptr, ticket_kernel)(next.get(), threads.get(), blocks.get());
      std::vector<int> all = threads.host();
      for (const int b : blocks.host()) all.push_back(b);
      return all;
    };
    const auto forward = tickets({echelon::cudasim::OrderKind::Forward, 0});
    const auto reverse = tickets({echelon::cudasim::OrderKind::Reverse, 0});
    for (int t = 0; t < 32; ++t) {
      CHECK(forward[t] == t);
      CHECK(reverse[t] == 31 - t);
    }
    CHECK(forward[32] == 0);
    CHECK(reverse[32] == 3);
    const auto r1 = tickets({echelon::cudasim::OrderKind::Random, 1});
    const auto r2 = tickets({echelon::cudasim::OrderKind::Random, 2});
    CHECK(r1 != forward);
    CHECK(r1 != reverse);
    CHECK(r1 != r2);
    // Reproducible: the random stream depends on the seed and the launch number only.
    CHECK(echelon::cudasim::order().kind == echelon::cudasim::OrderKind::Forward);
  }

  TEST_CASE("a missing barrier gives a wrong result in at least one order; with it, none") {
    // Fresh values per order: static __shared__ memory keeps the previous launch's contents, which
    // would otherwise be the right answer (docs/cudasim.md, limits).
    std::vector<int> in(64);
    int wrong_orders = 0, round = 0;
    for (const auto order : kOrders) {
      OrderScope scope(order);
      ++round;
      for (int i = 0; i < 64; ++i) in[i] = i * 3 + round * 1000;
      DeviceBuffer<int> x(in), with(64), without(64);
      ECH_LAUNCH(1, 64, 0, nullptr, neighbour_kernel<true>)(x.get(), with.get());
      ECH_LAUNCH(1, 64, 0, nullptr, neighbour_kernel<false>)(x.get(), without.get());
      const auto good = with.host(), bad = without.host();
      for (int t = 0; t < 64; ++t) REQUIRE(good[t] == in[(t + 1) % 64]);
      bool same = true;
      for (int t = 0; t < 64; ++t) same = same && bad[t] == in[(t + 1) % 64];
      wrong_orders += !same;
    }
    CHECK(wrong_orders >= 3);  // forward, and both random orders; reverse happens to be right
  }

  TEST_CASE("the grid cap makes grid-stride loops loop, with the same result") {
    echelon::cudasim::set_grid_cap(3);
    CHECK(echelon::cuda::grid_for(100000) == 3u);
    const auto before = echelon::cudasim::stats();
    DeviceBuffer<float> x(std::vector<float>(5000, 1.0f));
    echelon::cuda::launch_1d("add", 5000, nullptr, add_kernel, x.get(), 2.0f, 5000);
    for (const float v : x.host()) REQUIRE(v == 3.0f);
    CHECK(echelon::cudasim::stats().blocks - before.blocks == 3);
    echelon::cudasim::set_grid_cap(0);
    CHECK(echelon::cuda::grid_for(100000) == 391u);
  }
}
