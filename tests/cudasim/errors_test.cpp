// What the emulator must reject, as a GPU would (or should, where the GPU would hang or return
// garbage): divergent barriers, bad shuffle masks, deadlocks, launch limits, host pointers,
// out-of-bounds writes, and the real runtime's last-error / sticky-error semantics.
#include <string>
#include <vector>

#include <cub/block/block_reduce.cuh>

#include "tests/cudasim/support.h"

using namespace cudasim_test;

namespace {

constexpr unsigned kFull = 0xffffffffu;

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 200) __syncthreads();  // threads >= 200 exit without reaching it
  out[threadIdx.x] = 1.0f;
}

__global__ void two_barriers_kernel(float* out) {
  if (threadIdx.x % 2)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void exited_lane_kernel(float* out) {
  if (threadIdx.x == 7) return;
  out[threadIdx.x] = __shfl_down_sync(kFull, 1.0f, 1);
}

__global__ void mask_without_self_kernel(float* out) {
  if (threadIdx.x == 5) out[0] = __shfl_sync(0x1u, 1.0f, 0);  // lane 5 with mask {0}
}

__global__ void read_outside_mask_kernel(float* out) {
  out[threadIdx.x] = __shfl_sync(0x0000ffffu, 2.0f, 20);  // lanes 0..15 read lane 20
}

__global__ void partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_down_sync(kFull, 1.0f, 1);  // block of 40: lanes 8..31 of warp 1
}

__global__ void warp_vs_barrier_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x == 3)
    __syncthreads();
  else
    v = __shfl_xor_sync(kFull, v, 1);
  out[threadIdx.x] = v;
}

__global__ void mixed_collectives_kernel(int* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_sync(kFull, 1, 0);
  else
    out[threadIdx.x] = static_cast<int>(__ballot_sync(kFull, 1));
}

[[maybe_unused]] __global__ void out_of_bounds_kernel(float* out, int n) {  // not under ASan
  out[threadIdx.x] = 1.0f;  // launched with more threads than n
  (void)n;
}

// Thread (i, 0, 0) of block b writes out[offset] when i == b + 3: one stray write, named below.
__global__ void far_write_kernel(float* out, long offset) {
  if (threadIdx.x == blockIdx.x + 3) out[offset] = 1.0f;
}

__global__ void far_read_kernel(const float* in, long offset, float* out) {
  if (threadIdx.x == 9) out[0] = in[offset];
}

// Recursion deeper than a CUDA thread's stack (64 KiB; 512 KiB under ASan) holds.
__device__ int deep(int depth) {
  volatile char frame[1024];
  frame[depth % 1024] = static_cast<char>(depth);
  return depth == 0 ? frame[0] : deep(depth - 1) + frame[depth % 1024];
}

__global__ void stack_overflow_kernel(int* out, int depth) {
  if (threadIdx.x == 1) out[0] = deep(depth);
}

__global__ void write_kernel(float* out) {
  out[threadIdx.x] = 2.0f;
}

// Writes the first and last float of `bytes` of dynamic shared memory and reads them back.
__global__ void dynamic_shared_ends_kernel(float* out, int bytes) {
  ECH_DYNAMIC_SHARED(float, smem);
  const int last = bytes / static_cast<int>(sizeof(float)) - 1;
  if (threadIdx.x == 0) smem[0] = 1.0f, smem[last] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = smem[0] + smem[last];
}

// Writes one float just past `bytes` of dynamic shared memory.
__global__ void dynamic_shared_overrun_kernel(int bytes) {
  ECH_DYNAMIC_SHARED(float, smem);
  if (threadIdx.x == 0) smem[bytes / static_cast<int>(sizeof(float))] = 1.0f;
}

__global__ void trap_kernel(float* out) {
  if (threadIdx.x == 5) __trap();
  out[threadIdx.x] = 1.0f;
}

__global__ void wrong_block_reduce_kernel(double* out) {
  using Reduce = cub::BlockReduce<double, 128>;
  __shared__ Reduce::TempStorage temp;
  const double s = Reduce(temp).Sum(1.0);
  if (threadIdx.x == 0) out[0] = s;
}

}  // namespace

TEST_SUITE("cudasim_errors") {
  TEST_CASE("a barrier that part of the block skips fails the launch, naming kernel and site") {
    DeviceBuffer<float> out(256);
    const std::string why = failure_of([&] {
      ECH_LAUNCH(2, 256, 0, nullptr, divergent_barrier_kernel)
      (out.get());
    });
    CHECK(contains(why, "kernel divergent_barrier_kernel"));
    CHECK(contains(why, "errors_test.cpp:"));
    CHECK(contains(why, "reached by 200 of 256 threads; 56 exited"));
    CHECK(contains(why, "block ("));
  }

  TEST_CASE("threads waiting at two different __syncthreads() fail") {
    DeviceBuffer<float> out(64);
    const std::string why = failure_of([&] {
      ECH_LAUNCH(1, 64, 0, nullptr, two_barriers_kernel)
      (out.get());
    });
    CHECK(contains(why, "different __syncthreads()"));
  }

  TEST_CASE(
      "shuffle masks: exited lane, mask without the caller, lane outside mask, missing lane") {
    for (const auto order : kOrders) {
      OrderScope scope(order);
      DeviceBuffer<float> out(64);
      CHECK(contains(failure_of([&] {
                       ECH_LAUNCH(1, 32, 0, nullptr, exited_lane_kernel)
                       (out.get());
                     }),
                     "names lane 7, which has exited"));
      CHECK(contains(failure_of([&] {
                       ECH_LAUNCH(1, 32, 0, nullptr, mask_without_self_kernel)
                       (out.get());
                     }),
                     "with a mask without itself"));
      CHECK(contains(failure_of([&] {
                       ECH_LAUNCH(1, 16, 0, nullptr, read_outside_mask_kernel)
                       (out.get());
                     }),
                     "reads lane 20, which mask 0x0000ffff does not name"));
      CHECK(contains(failure_of([&] {
                       ECH_LAUNCH(1, 40, 0, nullptr, partial_warp_kernel)
                       (out.get());
                     }),
                     "which does not exist (block of 40 threads)"));
    }
  }

  TEST_CASE("a lane at a barrier while its warp shuffles: divergent warp") {
    DeviceBuffer<float> out(32);
    const std::string why = failure_of([&] {
      ECH_LAUNCH(1, 32, 0, nullptr, warp_vs_barrier_kernel)
      (out.get());
    });
    CHECK(contains(why, "waits at __syncthreads()"));
  }

  TEST_CASE("lanes of one mask calling different collectives") {
    DeviceBuffer<int> out(32);
    const std::string why = failure_of([&] {
      ECH_LAUNCH(1, 32, 0, nullptr, mixed_collectives_kernel)
      (out.get());
    });
    CHECK(contains(why, "must call the same collective"));
  }

  TEST_CASE("__trap() and a misused cub::BlockReduce fail the launch") {
    DeviceBuffer<float> out(32);
    CHECK(contains(failure_of([&] {
                     ECH_LAUNCH(1, 32, 0, nullptr, trap_kernel)
                     (out.get());
                   }),
                   "__trap() called"));
    DeviceBuffer<double> sum(1);
    CHECK(contains(failure_of([&] {
                     ECH_LAUNCH(1, 64, 0, nullptr, wrong_block_reduce_kernel)
                     (sum.get());
                   }),
                   "cub::BlockReduce<T, 128> used in a block of (64,1,1)"));
  }

  TEST_CASE("a write past the end of an allocation is caught by the guard bytes") {
#if defined(__SANITIZE_ADDRESS__)
    MESSAGE("skipped under AddressSanitizer: the guards are poisoned, ASan reports the write");
#else
    DeviceBuffer<float> out(100);
    const std::string why = failure_of([&] {
      ECH_LAUNCH(1, 101, 0, nullptr, out_of_bounds_kernel)
      (out.get(), 100);
    });
    CHECK(contains(why, "out_of_bounds_kernel"));
    CHECK(contains(why, "wrote up to 4 bytes past the end of a device allocation of 400 bytes"));
#endif
  }

  // Beyond the guard bytes lies a megabyte of PROT_NONE address space on each side
  // (guard_pages.cpp): the first access there faults, is recorded and let through, and fails the
  // launch, naming the thread. Before, such a write landed in the host heap. Far from the guard
  // bytes, so ASan (which poisons them) lets the access reach the guard page: this runs in every
  // build.
  TEST_CASE("an access far outside an allocation is caught by its guard pages, naming the thread") {
    DeviceBuffer<float> out(100);
    std::string why = failure_of([&] {
      ECH_LAUNCH(dim3(2, 1, 1), 32, 0, nullptr, far_write_kernel)
      (out.get(), 100 + 5000);
    });
    CHECK(contains(why, "kernel far_write_kernel (launched at errors_test.cpp:"));
    CHECK(contains(why,
                   "out-of-bounds write 20000 bytes past the end of a device allocation of "
                   "400 bytes, by block (0,0,0) thread (3,0,0) (a guard page)"));

    // The page is closed again: the same write faults again, from the other block this time.
    const echelon::cudasim::Order before = echelon::cudasim::order();
    echelon::cudasim::set_order({echelon::cudasim::OrderKind::Reverse, 0});
    why = failure_of([&] {
      ECH_LAUNCH(dim3(2, 1, 1), 32, 0, nullptr, far_write_kernel)
      (out.get(), 100 + 5000);
    });
    echelon::cudasim::set_order(before);
    CHECK(contains(why,
                   "20000 bytes past the end of a device allocation of 400 bytes, by block "
                   "(1,0,0) thread (4,0,0)"));

    DeviceBuffer<float> result(1);
    why = failure_of([&] {
      ECH_LAUNCH(1, 32, 0, nullptr, far_read_kernel)
      (out.get(), -200000, result.get());
    });
    CHECK(contains(why, "kernel far_read_kernel"));
    CHECK(contains(why,
                   "out-of-bounds read 800000 bytes before the start of a device allocation"
                   " of 400 bytes, by block (0,0,0) thread (9,0,0)"));

    // The context works again, and the allocation's own bytes were never touched.
    std::vector<float> host(100, 3.0f);
    REQUIRE(cudaMemcpy(out.get(), host.data(), 400, cudaMemcpyHostToDevice) == cudaSuccess);
    ECH_LAUNCH(1, 100, 0, nullptr, write_kernel)(out.get());
    REQUIRE(cudaMemcpy(host.data(), out.get(), 400, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host[99] == 2.0f);
  }

  TEST_CASE("a write past a block's dynamic shared memory is caught by its guard bytes") {
    const std::string why = failure_of([&] {
      ECH_LAUNCH(1, 32, 64, nullptr, dynamic_shared_overrun_kernel)
      (64);
    });
    CHECK(contains(why, "dynamic_shared_overrun_kernel"));
    CHECK(contains(why, "written past its 64 bytes of dynamic shared memory"));
  }

  // Not survivable: the process dies, after a line naming the kernel and thread. Run only by the
  // ctest cudasim_stack_overflow (--no-skip), which reads that line.
  TEST_CASE("a CUDA thread's stack overflow ends the process, naming the thread" *
            doctest::skip()) {
    DeviceBuffer<int> out(1);
    ECH_LAUNCH(1, 32, 0, nullptr, stack_overflow_kernel)(out.get(), 1 << 20);
    cudaDeviceSynchronize();
    FAIL("the process should have ended");
  }

  TEST_CASE("a host pointer passed to a kernel is an illegal address") {
    float host[32];
    const std::string why = failure_of([&] { ECH_LAUNCH(1, 32, 0, nullptr, write_kernel)(host); });
    CHECK(contains(why, "argument 0"));
    CHECK(contains(why, "is host memory"));
  }

  TEST_CASE("launch limits as the driver checks them, reported by cudaGetLastError only") {
    DeviceBuffer<float> out(1024);
    const auto launch_error = [&](dim3 grid, dim3 block, size_t smem) {
      ECH_LAUNCH(grid, block, smem, nullptr, write_kernel)(out.get());
      const cudaError_t first = cudaGetLastError();
      CHECK(cudaGetLastError() == cudaSuccess);  // not sticky: read once, then cleared
      return first;
    };
    CHECK(launch_error(1, 1025, 0) == cudaErrorInvalidConfiguration);
    CHECK(launch_error(1, dim3(32, 1, 65), 0) == cudaErrorInvalidConfiguration);
    CHECK(launch_error(1, dim3(64, 32), 0) == cudaErrorInvalidConfiguration);  // 2048 threads
    CHECK(launch_error(dim3(1, 65536), 32, 0) == cudaErrorInvalidConfiguration);
    CHECK(launch_error(0, 32, 0) == cudaErrorInvalidConfiguration);
    CHECK(launch_error(1, 32, 48 * 1024 + 1) == cudaErrorInvalidValue);
    CHECK(launch_error(1, 32, 48 * 1024) == cudaSuccess);
    CHECK(launch_error(dim3(1, 1, 1), dim3(1024), 0) == cudaSuccess);
    ECH_LAUNCH(1, 32, 0, reinterpret_cast<cudaStream_t>(0x1234), write_kernel)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(echelon::cudasim::sticky_message().empty());
  }

  TEST_CASE("dynamic shared memory past 48 KiB: only after the kernel's opt-in, at most 227 KiB") {
    DeviceBuffer<float> out(32);
    const auto launch_error = [&](size_t smem) {
      ECH_LAUNCH(1, 32, smem, nullptr, dynamic_shared_ends_kernel)(out.get(), int(smem));
      const cudaError_t first = cudaGetLastError();
      CHECK(cudaDeviceSynchronize() == cudaSuccess);
      return first;
    };
    constexpr int kOptinLimit = 232448;  // an H200's cudaDevAttrMaxSharedMemoryPerBlockOptin
    const auto opt_in = [](auto kernel, int bytes) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      CHECK(cudaGetLastError() == e);  // a failed opt-in is the last error, as in the runtime
      return e;
    };
    CHECK(launch_error(48 * 1024) == cudaSuccess);
    CHECK(launch_error(64 * 1024) == cudaErrorInvalidValue);  // no opt-in yet
    CHECK(opt_in(dynamic_shared_ends_kernel, kOptinLimit + 1) == cudaErrorInvalidValue);
    CHECK(opt_in(dynamic_shared_ends_kernel, -1) == cudaErrorInvalidValue);
    CHECK(launch_error(64 * 1024) == cudaErrorInvalidValue);  // the failed opt-ins set nothing
    CHECK(opt_in(dynamic_shared_ends_kernel, 64 * 1024) == cudaSuccess);
    CHECK(launch_error(64 * 1024) == cudaSuccess);
    CHECK(launch_error(64 * 1024 + 4) == cudaErrorInvalidValue);  // past its opt-in
    // Another kernel keeps the default.
    ECH_LAUNCH(1, 32, 64 * 1024, nullptr, write_kernel)(out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(opt_in(dynamic_shared_ends_kernel, kOptinLimit) == cudaSuccess);
    CHECK(launch_error(kOptinLimit) == cudaSuccess);
    std::vector<float> host(32);
    CHECK(cudaMemcpy(host.data(), out.get(), 32 * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
    CHECK(host[31] == 3.0f);  // all 227 KiB are there
    CHECK(echelon::cudasim::sticky_message().empty());
  }

  TEST_CASE("a kernel fault is sticky: every later call returns it, with the diagnosis") {
    DeviceBuffer<float> out(256);
    ECH_LAUNCH(1, 256, 0, nullptr, divergent_barrier_kernel)(out.get());
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // not cleared by reading
    void* p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaErrorLaunchFailure);
    cudaFree(p);
    CHECK(contains(cudaGetErrorString(cudaErrorLaunchFailure), "reached by"));
    // The project's check macro turns it into an echelon::Error with the same text.
    try {
      ECH_CUDA_CHECK(cudaStreamSynchronize(nullptr));
      FAIL("no error");
    } catch (const echelon::Error& e) {
      CHECK(contains(e.what(), "cudaErrorLaunchFailure"));
      CHECK(contains(e.what(), "divergent_barrier_kernel"));
    }
    echelon::cudasim::clear_sticky_error();
    CHECK(cudaGetLastError() == cudaSuccess);
  }

  TEST_CASE("usage errors: bad device, bad free, copy kinds and ranges") {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count) == cudaSuccess);
    CHECK(cudaSetDevice(count) == cudaErrorInvalidDevice);
    CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
    int host = 0;
    CHECK(cudaFree(&host) == cudaErrorInvalidValue);
    cudaGetLastError();
    DeviceBuffer<int> d(4);
    int h[8] = {};
    CHECK(cudaMemcpy(d.get(), h, 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(h, d.get(), 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    CHECK(cudaMemcpy(d.get(), h, 32, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // overrun
    CHECK(cudaMemcpy(d.get(), h, 16, cudaMemcpyDefault) == cudaSuccess);
    CHECK(cudaMemsetAsync(h, 0, 4, nullptr) == cudaErrorInvalidValue);
    cudaGetLastError();
    void* huge = nullptr;
    CHECK(cudaMalloc(&huge, size_t{1} << 50) == cudaErrorMemoryAllocation);
    CHECK(huge == nullptr);
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaSuccess);
  }

  TEST_CASE("order names parse, and a bad one is rejected") {
    CHECK(echelon::cudasim::to_string(echelon::cudasim::parse_order("random:42")) == "random:42");
    CHECK(echelon::cudasim::to_string(echelon::cudasim::parse_order("reverse")) == "reverse");
    CHECK_THROWS(echelon::cudasim::parse_order("backwards"));
    CHECK_THROWS(echelon::cudasim::parse_order("random:"));
    CHECK_THROWS(echelon::cudasim::parse_order("random:x1"));
  }
}
