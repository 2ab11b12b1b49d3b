// The CUDA runtime glue on a real device: caching allocator (reuse, stats, rounding, per-stream
// lists, OOM message), streams/events/guards, pinned memory with asynchronous copies, cuBLAS
// handles, error messages, and Philox CPU == CUDA bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <echelon/cuda/allocator.h>
#include <echelon/cuda/blas.h>
#include <echelon/cuda/kernels/matmul.h>
#include <echelon/cuda/stream.h>
#include <echelon/tensor/ops.h>
#include "tests/support/parity.h"

using namespace echelon;

namespace {
// Blocks a stream with a host function until released (or destroyed), so that work queued on it
// is deterministically "still running" while a test looks at the allocator. While it blocks, the
// test must not call anything that may wait for the device (cudaMalloc, cudaHostAlloc, cudaFree
// can synchronise): the tests allocate what they need before blocking and check that no cache
// miss happened inside. The wait is bounded, so a hidden synchronisation fails the test
// (timed_out) instead of hanging it.
class StreamBlocker {
 public:
  static constexpr std::chrono::seconds kLimit{10};

  explicit StreamBlocker(cudaStream_t stream) : stream_(stream) {
    ECH_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamBlocker::spin, &state_));
  }
  ~StreamBlocker() {
    release();
    cudaStreamSynchronize(stream_);  // the host function reads state_
  }
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;
  void release() { state_.released.store(true); }
  // True when the host function gave up before release(): something in the blocked section
  // waited for the stream, so what the test saw there proves nothing.
  bool timed_out() const { return state_.timed_out.load(); }

 private:
  struct State {
    std::atomic<bool> released{false};
    std::atomic<bool> timed_out{false};
  };
  static void spin(void* arg) {
    auto* state = static_cast<State*>(arg);
    const auto deadline = std::chrono::steady_clock::now() + kLimit;
    while (!state->released.load()) {
      if (std::chrono::steady_clock::now() > deadline) {
        state->timed_out.store(true);
        return;
      }
      std::this_thread::yield();
    }
  }
  cudaStream_t stream_;
  State state_;
};

// Under CUDA_LAUNCH_BLOCKING=1 (tools/gpu-check.sh's first pass) a launch may wait for its work,
// so "queued but not yet run" cannot be set up: the StreamBlocker tests run in the normal pass.
bool launches_block() {
  const char* env = std::getenv("CUDA_LAUNCH_BLOCKING");
  return env != nullptr && std::string(env) == "1";
}
// True (after saying so) when a StreamBlocker test must not run.
bool skip_when_launches_block() {
  if (!launches_block()) return false;
  MESSAGE("skipped under CUDA_LAUNCH_BLOCKING=1: a blocked stream cannot be set up");
  return true;
}

// Takes pinned blocks of `bytes` until the cached block p comes back (blocks cached by earlier
// tests may be served first; p must come back before any new cudaHostAlloc), then frees them.
bool pinned_comes_back(void* p, size_t bytes) {
  std::vector<void*> taken;
  bool reused = false;
  for (int i = 0; i < 64 && !reused; ++i) {
    taken.push_back(cuda::pinned_malloc(bytes));
    reused = taken.back() == p;
  }
  for (void* block : taken) cuda::pinned_free(block);
  return reused;
}
}  // namespace

TEST_SUITE("allocator_gpu") {
  TEST_CASE("a freed block is reused for a request of the same size class") {
    // Nothing cached from earlier tests: a new stream's handle may equal a destroyed stream's,
    // whose cached blocks would serve the first request without a cudaMalloc.
    cuda::empty_cache(0);
    cuda::Stream stream;
    const cuda::AllocatorStats before = cuda::allocator_stats(0);
    void* first = cuda::device_malloc(0, 1000, stream.get());
    const cuda::AllocatorStats during = cuda::allocator_stats(0);
    CHECK(during.allocated_bytes == before.allocated_bytes + 1024);  // 512-byte classes
    CHECK(during.num_cuda_mallocs == before.num_cuda_mallocs + 1);
    cuda::device_free(0, first);
    void* second = cuda::device_malloc(0, 700, stream.get());
    CHECK(second == first);
    const cuda::AllocatorStats after = cuda::allocator_stats(0);
    CHECK(after.num_cuda_mallocs == during.num_cuda_mallocs);
    CHECK(after.num_allocs == during.num_allocs + 1);
    cuda::device_free(0, second);
    CHECK(cuda::allocator_stats(0).allocated_bytes == before.allocated_bytes);
  }

#if ECHELON_CUDA_SIM
  // As cudaMalloc's memory in the emulator: a kernel that reads what its tensor's owner never
  // wrote reads NaN, not the previous tensor's values, also from a cached block.
  TEST_CASE("emulation: a block handed out again is NaN-filled in stream order") {
    cuda::Stream stream;
    const size_t n = 300;
    auto* first = static_cast<float*>(cuda::device_malloc(0, n * sizeof(float), stream.get()));
    const std::vector<float> ones(n, 1.0f);
    REQUIRE(cudaMemcpyAsync(first, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                            stream.get()) == cudaSuccess);
    cuda::device_free(0, first);
    auto* second = static_cast<float*>(cuda::device_malloc(0, n * sizeof(float), stream.get()));
    REQUIRE(second == first);
    std::vector<float> back(n, 0.0f);
    REQUIRE(cudaMemcpyAsync(back.data(), second, n * sizeof(float), cudaMemcpyDeviceToHost,
                            stream.get()) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream.get()) == cudaSuccess);
    CHECK(std::all_of(back.begin(), back.end(), [](float v) { return std::isnan(v); }));
    cuda::device_free(0, second);
  }
#endif

  TEST_CASE("large requests round to 2 MiB; peaks and empty_cache") {
    cuda::empty_cache(0);
    cuda::reset_peak_stats(0);
    const cuda::AllocatorStats before = cuda::allocator_stats(0);
    void* p = cuda::device_malloc(0, (3u << 20) + 5, nullptr);
    const cuda::AllocatorStats during = cuda::allocator_stats(0);
    CHECK(during.reserved_bytes == before.reserved_bytes + (4u << 20));
    CHECK(during.peak_allocated_bytes >= before.allocated_bytes + (4u << 20));
    cuda::device_free(0, p);
    CHECK(cuda::allocator_stats(0).reserved_bytes == during.reserved_bytes);  // cached
    cuda::empty_cache(0);
    CHECK(cuda::allocator_stats(0).reserved_bytes == before.reserved_bytes);
    CHECK(cuda::allocator_stats(0).peak_allocated_bytes == during.peak_allocated_bytes);
  }

  TEST_CASE("blocks freed by one stream are not handed to another") {
    cuda::Stream a, b;
    void* pa = cuda::device_malloc(0, 4096, a.get());
    cuda::device_free(0, pa);
    void* pb = cuda::device_malloc(0, 4096, b.get());
    CHECK(pb != pa);
    void* pa2 = cuda::device_malloc(0, 4096, a.get());
    CHECK(pa2 == pa);
    cuda::device_free(0, pb);
    cuda::device_free(0, pa2);
  }

  TEST_CASE("a block used on another stream is reused only after that stream's work") {
    if (skip_when_launches_block()) return;
    cuda::Stream a, b;
    void* p = cuda::device_malloc(0, 8192, a.get());
    cuda::record_stream(0, p, b.get());
    // A second block of the class, cached on a before blocking: the request inside the blocked
    // section is served from the cache (no cudaMalloc, which may wait for the blocked stream).
    cuda::device_free(0, cuda::device_malloc(0, 8192, a.get()));
    void* q = nullptr;  // held until the end, so that the second request can only get p back
    {
      StreamBlocker blocker(b.get());  // b's queued work has not run yet
      const uint64_t mallocs = cuda::allocator_stats(0).num_cuda_mallocs;
      cuda::device_free(0, p);
      q = cuda::device_malloc(0, 8192, a.get());
      CHECK(q != p);
      CHECK(cuda::allocator_stats(0).num_cuda_mallocs == mallocs);
      blocker.release();
      b.synchronize();
      CHECK_FALSE(blocker.timed_out());
    }
    void* r = cuda::device_malloc(0, 8192, a.get());
    CHECK(r == p);
    cuda::device_free(0, r);
    cuda::device_free(0, q);
  }

  TEST_CASE("a tensor freed on another stream than its own waits for that stream") {
    if (skip_when_launches_block()) return;
    cuda::Stream copy_stream, user_stream;
    const Shape shape = {4099};
    {
      // Two blocks of the class cached on copy_stream before blocking (see above).
      cuda::StreamGuard guard(copy_stream);
      const Tensor warm1 = Tensor::empty(shape, kFloat32, Device::cuda(0));
      const Tensor warm2 = Tensor::empty(shape, kFloat32, Device::cuda(0));
    }
    const void* first = nullptr;
    Tensor again;  // held until the end, so that `later` can only get the first block back
    {
      StreamBlocker blocker(user_stream.get());
      const uint64_t mallocs = cuda::allocator_stats(0).num_cuda_mallocs;
      {
        Tensor t;
        {
          cuda::StreamGuard guard(copy_stream);
          t = Tensor::empty(shape, kFloat32, Device::cuda(0));
        }
        first = t.raw_data();
        cuda::StreamGuard guard(user_stream);  // the freeing thread's current stream
        t = Tensor();
      }
      cuda::StreamGuard guard(copy_stream);
      again = Tensor::empty(shape, kFloat32, Device::cuda(0));
      CHECK(again.raw_data() != first);
      CHECK(cuda::allocator_stats(0).num_cuda_mallocs == mallocs);
      blocker.release();
      user_stream.synchronize();
      CHECK_FALSE(blocker.timed_out());
    }
    cuda::StreamGuard guard(copy_stream);
    const Tensor later = Tensor::empty(shape, kFloat32, Device::cuda(0));
    CHECK(later.raw_data() == first);
  }

  TEST_CASE("a destroyed stream's cached blocks are reused by other streams") {
    const size_t nbytes = (7u << 20) + 3;  // an 8 MiB class no other test uses
    void* p = nullptr;
    {
      cuda::Stream dying;
      p = cuda::device_malloc(0, nbytes, dying.get());
      cuda::device_free(0, p);
    }
    cuda::Stream other;
    void* q = cuda::device_malloc(0, nbytes, other.get());
    CHECK(q == p);
    cuda::device_free(0, q);
  }

  TEST_CASE("an absurd request throws a message with the size and the statistics") {
    const size_t petabyte = size_t{1} << 50;
    try {
      cuda::device_malloc(0, petabyte, nullptr);
      FAIL("a 1 PiB allocation succeeded");
    } catch (const Error& e) {
      const std::string message = e.what();
      CHECK(message.find("out of memory") != std::string::npos);
      CHECK(message.find(std::to_string(petabyte)) != std::string::npos);
      CHECK(message.find("reserved") != std::string::npos);
    }
    // The allocator still works afterwards.
    void* p = cuda::device_malloc(0, 64, nullptr);
    CHECK(p != nullptr);
    cuda::device_free(0, p);
    CHECK_THROWS_AS(cuda::device_free(0, reinterpret_cast<void*>(0x1234)), Error);
    CHECK_THROWS_AS(cuda::device_malloc(cuda::device_count(), 64, nullptr), Error);
  }

  TEST_CASE("tensors go through the cache") {
    const void* first = nullptr;
    {
      const Tensor t = Tensor::empty({333, 77}, kFloat32, Device::cuda(0));
      first = t.raw_data();
    }
    const Tensor again = Tensor::empty({333, 77}, kFloat32, Device::cuda(0));
    CHECK(again.raw_data() == first);
  }
}

TEST_SUITE("stream_gpu") {
  TEST_CASE("devices, guards and the thread-local current stream") {
    CHECK(cuda::device_count() >= 1);
    CHECK(cuda::current_stream(0) == nullptr);
    cuda::Stream stream(0);
    {
      cuda::StreamGuard guard(stream);
      CHECK(cuda::current_stream(0) == stream.get());
      cudaStream_t seen_by_other_thread = stream.get();
      std::thread([&] { seen_by_other_thread = cuda::current_stream(0); }).join();
      CHECK(seen_by_other_thread == nullptr);
    }
    CHECK(cuda::current_stream(0) == nullptr);
    CHECK_THROWS_AS(cuda::set_device(cuda::device_count() + 3), Error);
    // The context is created on a thread of its own: this thread's current device stays.
    const int current = cuda::current_device();
    warm_up_device(Device::cuda(0)).get();
    CHECK(cuda::current_device() == current);
    CHECK_THROWS_WITH_AS(warm_up_device(Device::cuda(cuda::device_count() + 3)).get(),
                         doctest::Contains("does not exist"), Error);
    try {
      ECH_CUDA_CHECK(cudaSetDevice(12345));
      FAIL("cudaSetDevice(12345) succeeded");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("cudaErrorInvalidDevice") != std::string::npos);
      CHECK(std::string(e.what()).find("cudaSetDevice(12345)") != std::string::npos);
    }
  }

  TEST_CASE("an event orders work across streams and times it") {
    cuda::Stream producer, consumer;
    const Tensor host = parity::random_cpu({1023, 517}, 3, 2.0);
    Tensor device = Tensor::empty(host.shape(), kFloat32, Device::cuda(0));
    cuda::Event start(true), done(true);
    {
      cuda::StreamGuard guard(producer);
      start.record(producer.get());
      ops::copy_(device, host);
      Tensor doubled = ops::mul(device, 2.0);
      ops::copy_(device, doubled);
      done.record(producer.get());
    }
    done.wait(consumer.get());
    Tensor result;
    {
      cuda::StreamGuard guard(consumer);
      result = ops::add(device, 1.0);
    }
    consumer.synchronize();
    CHECK(done.query());
    CHECK(start.elapsed_ms(done) >= 0.0f);
    const Tensor expected = ops::add(ops::mul(host, 2.0), 1.0);
    CHECK(parity::compare(result, expected, {1e-6, 1e-6}).ok);
  }

  TEST_CASE("cuBLAS handles: one per thread, bound to the current stream") {
    cublasHandle_t mine = cuda::cublas_handle(0);
    CHECK(cuda::cublas_handle(0) == mine);
    cublasHandle_t other = nullptr;
    std::thread([&] { other = cuda::cublas_handle(0); }).join();
    CHECK(other != nullptr);
    cuda::Stream stream;
    cuda::StreamGuard guard(stream);
    cudaStream_t bound = nullptr;
    ECH_CUBLAS_CHECK(cublasGetStream(cuda::cublas_handle(0), &bound));
    CHECK(bound == stream.get());
  }
}

TEST_SUITE("sync_launches_gpu") {
  TEST_CASE("ECHELON_SYNC_LAUNCHES is read as a switch") {
    const char* saved = std::getenv("ECHELON_SYNC_LAUNCHES");
    const std::string saved_value = saved ? saved : "";
    for (const char* on : {"1", "true", "yes"}) {
      ::setenv("ECHELON_SYNC_LAUNCHES", on, 1);
      CHECK_MESSAGE(cuda::read_sync_launches_env(), on);
    }
    for (const char* off : {"0", "", "off", "false"}) {
      ::setenv("ECHELON_SYNC_LAUNCHES", off, 1);
      CHECK_FALSE_MESSAGE(cuda::read_sync_launches_env(), off);
    }
    ::unsetenv("ECHELON_SYNC_LAUNCHES");
    CHECK_FALSE(cuda::read_sync_launches_env());
    if (saved) ::setenv("ECHELON_SYNC_LAUNCHES", saved_value.c_str(), 1);
  }

  TEST_CASE("on: every kernel has finished when its op returns") {
    const bool before = cuda::sync_launches();
    cuda::set_sync_launches(true);
    cuda::Stream stream;
    int still_running = 0;
    {
      cuda::StreamGuard guard(stream);
#if ECHELON_CUDA_SIM
      Tensor x =
          parity::random_cpu({1 << 14}, 5, 2.0).to(Device::cuda(0));  // the emulator is slow enough
#else
      Tensor x =
          parity::random_cpu({1 << 22}, 5, 2.0).to(Device::cuda(0));  // 16 MiB: not done in a blink
#endif
      for (int i = 0; i < 16; ++i) {
        x = ops::mul(x, 1.0001);
        if (cudaStreamQuery(stream.get()) != cudaSuccess) ++still_running;
      }
    }
    cuda::set_sync_launches(before);
    CHECK(still_running == 0);
  }
}

TEST_SUITE("transfer_gpu") {
  TEST_CASE("asynchronous to() from pinned memory round-trips") {
    const Tensor host = parity::random_cpu({257, 1031}, 11, 2.0);
    const Tensor pinned = host.pin_memory();
    CHECK(pinned.is_pinned());
    cuda::Stream copy_stream;
    Tensor on_device, back;
    {
      cuda::StreamGuard guard(copy_stream);
      on_device = pinned.to(Device::cuda(0), /*non_blocking=*/true);
      back = on_device.to(Device::cpu());
    }
    copy_stream.synchronize();
    CHECK(on_device.is_cuda());
    CHECK(parity::compare(back, host, {0, 0}).ok);
  }

  TEST_CASE("a pinned block is not reused while a copy recorded on it may still run") {
    if (skip_when_launches_block()) return;
    cuda::Stream stream;
    void* device = cuda::device_malloc(0, 20000, stream.get());
    void* p = cuda::pinned_malloc(20000);
    // A second pinned block of the class, cached before blocking: cudaHostAlloc may synchronise.
    void* spare = cuda::pinned_malloc(20000);
    cuda::pinned_free(spare);
    void* q = nullptr;  // held until the end: after the copy, only p can come back of these
    {
      StreamBlocker blocker(stream.get());
      ECH_CUDA_CHECK(cudaMemcpyAsync(device, p, 20000, cudaMemcpyHostToDevice, stream.get()));
      cuda::pinned_record_stream(p, stream.get());
      cuda::pinned_free(p);
      q = cuda::pinned_malloc(20000);
      CHECK(q != p);
      blocker.release();
      stream.synchronize();
      CHECK_FALSE(blocker.timed_out());
    }
    // Now p is reusable. Earlier tests may have cached blocks of the class whose copies were
    // still running at the first request and are done now, served first.
    CHECK(pinned_comes_back(p, 20000));
    cuda::pinned_free(q);
    cuda::device_free(0, device);
  }

  TEST_CASE("pinned blocks are cached once their last copy completed") {
    void* p = cuda::pinned_malloc(10000);
    cuda::pinned_free(p);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    // Earlier tests may have cached blocks of the same size class, served first.
    CHECK(pinned_comes_back(p, 9000));
    CHECK_THROWS_AS(cuda::pinned_free(reinterpret_cast<void*>(0x40)), Error);
  }
}

TEST_SUITE("random_gpu") {
  TEST_CASE("Philox: uniform and Bernoulli are bitwise equal on CPU and CUDA") {
    for (const uint64_t offset : {0ull, 1ull, 12345ull}) {
      Generator cpu_gen(77), gpu_gen(77);
      cpu_gen.set_state(77, offset);
      gpu_gen.set_state(77, offset);
      const Tensor u_cpu = ops::rand({1001, 13}, cpu_gen);
      const Tensor u_gpu = ops::rand({1001, 13}, gpu_gen, kFloat32, Device::cuda(0));
      CHECK(u_cpu.to_vector<float>() == u_gpu.cpu().to_vector<float>());
      const Tensor b_cpu = ops::bernoulli({77, 129}, 0.37, cpu_gen);
      const Tensor b_gpu = ops::bernoulli({77, 129}, 0.37, gpu_gen, kFloat32, Device::cuda(0));
      CHECK(b_cpu.to_vector<float>() == b_gpu.cpu().to_vector<float>());
      CHECK(cpu_gen.offset() == gpu_gen.offset());
    }
  }

  TEST_CASE("Philox normals agree to float rounding") {
    Generator cpu_gen(5), gpu_gen(5);
    const Tensor n_cpu = ops::randn({333, 3}, cpu_gen);
    const Tensor n_gpu = ops::randn({333, 3}, gpu_gen, kFloat32, Device::cuda(0));
    CHECK(parity::compare(n_gpu, n_cpu, {1e-6, 1e-6}).ok);
  }
}

TEST_SUITE("matmul_gpu") {
  TEST_CASE("our SGEMM and cuBLAS agree with the CPU on a multi-tile odd problem") {
    const Tensor a = parity::random_cpu({513, 257}, 1, 2.0),
                 b = parity::random_cpu({257, 1025}, 2, 2.0);
    ops::set_matmul_impl(ops::MatmulImpl::Naive);
    const Tensor expected = ops::matmul(a, b);
    for (const ops::MatmulImpl impl : {ops::MatmulImpl::Ours, ops::MatmulImpl::Blas}) {
      ops::set_matmul_impl(impl);
      const Tensor got = ops::matmul(a.to(Device::cuda(0)), b.to(Device::cuda(0)));
      const parity::Comparison cmp = parity::compare(got, expected, {1e-4, 1e-4});
      CHECK_MESSAGE(cmp.ok, "impl ", static_cast<int>(impl), ": ", cmp.summary());
    }
    ops::set_matmul_impl(ops::MatmulImpl::Auto);
  }

  // The warp-tiled FMA core of the 128x128 tile (cuda::set_fma_warp_tiles) against the
  // block-strided one, bit for bit (each output the same fmaf chain over k), and against a CPU
  // sum: every staging of each operand (16-byte aligned or not, by a one-float offset, times
  // both transposes: Scalar k- or d-fastest, Vector, Async: the 16 loops of
  // with_constant_staging), odd M, N, K around the tile sizes, 2 batches, alpha and beta.
  TEST_CASE("the warp-tiled FMA core gives the block-strided core's results bit for bit") {
    const bool before = cuda::fma_warp_tiles();  // ECHELON_FMA_CORE=old may have cleared it
    const int64_t batch = 2;
    const float alpha = 1.25f, beta = 0.5f;
    struct Size {
      int64_t m, n, k;
    };
    for (const Size z : {Size{257, 131, 37}, Size{129, 385, 9}, Size{256, 256, 1}})
      for (int mask = 0; mask < 16; ++mask) {
        const bool ta = mask & 1, tb = mask & 2, aligned_a = mask & 4, aligned_b = mask & 8;
        const int64_t a_rows = ta ? z.k : z.m, a_cols = ta ? z.m : z.k;
        const int64_t b_rows = tb ? z.n : z.k, b_cols = tb ? z.k : z.n;
        const int64_t lda = (a_cols + 3) / 4 * 4, ldb = (b_cols + 3) / 4 * 4, ldc = z.n + 3;
        const int64_t stride_a = lda * a_rows, stride_b = ldb * b_rows, stride_c = ldc * z.m;
        const int64_t off_a = aligned_a ? 0 : 1, off_b = aligned_b ? 0 : 1;
        const Tensor a = parity::random_cpu({off_a + batch * stride_a}, 11 + mask, 2.0);
        const Tensor b = parity::random_cpu({off_b + batch * stride_b}, 31 + mask, 2.0);
        const Tensor c0 = parity::random_cpu({batch * stride_c}, 7, 2.0);
        const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
        const auto run = [&](bool warp_tiles) {
          cuda::set_fma_warp_tiles(warp_tiles);
          Tensor c = c0.to(Device::cuda(0));
          cuda::gemm_strided_batched(ta, tb, z.m, z.n, z.k, alpha, a_gpu.data<float>() + off_a, lda,
                                     stride_a, b_gpu.data<float>() + off_b, ldb, stride_b, beta,
                                     c.data<float>(), ldc, stride_c, batch,
                                     cuda::current_stream(0));
          cuda::set_fma_warp_tiles(before);
          return c.cpu().to_vector<float>();
        };
        const std::vector<float> warp = run(true), strided = run(false);
        INFO("M=", z.m, " N=", z.n, " K=", z.k, " trans_a=", ta, " trans_b=", tb,
             " aligned_a=", aligned_a, " aligned_b=", aligned_b);
        CHECK(warp == strided);
        const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>(),
                                 vc = c0.to_vector<float>();
        double worst = 0.0;
        for (int64_t p = 0; p < batch; ++p)
          for (int64_t i = 0; i < z.m; ++i)
            for (int64_t j = 0; j < z.n; ++j) {
              double sum = 0.0;
              for (int64_t k = 0; k < z.k; ++k)
                sum += double{va[off_a + p * stride_a + (ta ? k * lda + i : i * lda + k)]} *
                       vb[off_b + p * stride_b + (tb ? j * ldb + k : k * ldb + j)];
              const int64_t at = p * stride_c + i * ldc + j;
              const double want = alpha * sum + beta * vc[at];
              worst = std::max(worst, std::abs(warp[at] - want) / (1.0 + std::abs(want)));
            }
        CHECK(worst < 1e-4);
        // The padding past N in each row of C is left alone.
        CHECK(warp[z.n] == vc[z.n]);
      }
  }

  // gemm_batch_reduce (the conv backward-weight split-K): C_g = alpha * sum over the batches of
  // group g of A_b B_b^T + beta * C_g, 7 batches in groups of 3 (the last holds one), once with
  // the large tile (M, N >= 128) and once with the small one.
  TEST_CASE("gemm_batch_reduce sums each group of batches, with alpha and beta") {
    const int64_t batch = 7, per_group = 3, groups = 3, k = 45;
    // Not a structured binding: clang 14 cannot capture one in CHECK_MESSAGE.
    for (const auto& shape : {std::pair<int64_t, int64_t>{130, 140}, {33, 20}}) {
      const int64_t m = shape.first, n = shape.second;
      const Tensor a = parity::random_cpu({batch, m, k}, 3, 2.0),
                   b = parity::random_cpu({batch, n, k}, 4, 2.0);
      const Tensor c0 = parity::random_cpu({groups, m, n}, 5, 2.0);
      ops::set_matmul_impl(ops::MatmulImpl::Naive);
      std::vector<Tensor> expected;
      for (int64_t g = 0; g < groups; ++g) {
        Tensor acc = ops::mul(c0.select(0, g), 0.5);
        for (int64_t i = g * per_group; i < std::min(batch, (g + 1) * per_group); ++i)
          acc = ops::add(acc,
                         ops::mul(ops::matmul(a.select(0, i), b.select(0, i), false, true), 1.5));
        expected.push_back(acc);
      }
      ops::set_matmul_impl(ops::MatmulImpl::Auto);
      const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
      Tensor c = c0.to(Device::cuda(0));
      cuda::gemm_batch_reduce(false, true, m, n, k, 1.5f, a_gpu.data<float>(), k, m * k,
                              b_gpu.data<float>(), k, n * k, 0.5f, c.data<float>(), n, m * n, batch,
                              per_group, cuda::current_stream(0));
      const Tensor got = c.cpu();
      for (int64_t g = 0; g < groups; ++g) {
        const parity::Comparison cmp = parity::compare(got.select(0, g), expected[g], {1e-4, 1e-4});
        CHECK_MESSAGE(cmp.ok, "M=", m, " N=", n, " group ", g, ": ", cmp.summary());
      }
    }
  }
}
