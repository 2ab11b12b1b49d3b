// Stream capture and graphs in the emulator: captured work is recorded, not run; a replay runs it
// in order on the launch stream and re-reads the same device memory; streams forked into the
// capture by events join it; a synchronisation, an unsafe call or an outside dependency during
// capture invalidates it with the real runtime's errors.
#include <cmath>
#include <thread>

#include "tests/cudasim/support.h"

using namespace cudasim_test;

namespace {

__global__ void scale_add_kernel(float* y, const float* x, const float* scale, int n) {
  for (int64_t i = echelon::cuda::grid_start(); i < n; i += echelon::cuda::grid_step())
    y[i] = y[i] * scale[0] + x[i];
}

void scale_add(cudaStream_t stream, float* y, const float* x, const float* scale, int n) {
  ECH_LAUNCH(2, 64, 0, stream, scale_add_kernel)(y, x, scale, n);
}

cudaStream_t make_stream() {
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

cudaStreamCaptureStatus capture_status(cudaStream_t stream) {
  cudaStreamCaptureStatus status;
  REQUIRE(cudaStreamIsCapturing(stream, &status) == cudaSuccess);
  return status;
}

// Begins a capture on `stream`, runs `body`, ends it: the graph (nullptr when ending failed) and
// EndCapture's error.
template <typename Body>
std::pair<cudaGraph_t, cudaError_t> capture(
    cudaStream_t stream, Body body, cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal) {
  REQUIRE(cudaStreamBeginCapture(stream, mode) == cudaSuccess);
  body();
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream, &graph);
  cudaGetLastError();  // the capture's errors are the test's business, not the next call's
  return {graph, err};
}

}  // namespace

TEST_SUITE("cudasim_graph") {
  TEST_CASE("captured work does not run; each replay runs it in order on the current contents") {
    const int n = 100;
    DeviceBuffer<float> y(std::vector<float>(n, 1.0f)), x(std::vector<float>(n, 2.0f));
    DeviceBuffer<float> scale(std::vector<float>{3.0f});
    std::vector<float> host_x(n, 5.0f);
    cudaStream_t stream = make_stream();
    auto [graph, err] = capture(stream, [&] {
      CHECK(capture_status(stream) == cudaStreamCaptureStatusActive);
      scale_add(stream, y.get(), x.get(), scale.get(), n);
      // A copy into x between the two launches: order inside the graph matters.
      CHECK(cudaMemcpyAsync(x.get(), host_x.data(), n * sizeof(float), cudaMemcpyHostToDevice,
                            stream) == cudaSuccess);
      scale_add(stream, y.get(), x.get(), scale.get(), n);
    });
    REQUIRE(err == cudaSuccess);
    REQUIRE(graph != nullptr);
    CHECK(capture_status(stream) == cudaStreamCaptureStatusNone);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(y.host()[0] == 1.0f);  // nothing ran during capture
    CHECK(x.host()[7] == 2.0f);

    cudaGraphExec_t exec;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(y.host()[0] == (1.0f * 3 + 2) * 3 + 5);  // 20
    CHECK(x.host()[n - 1] == 5.0f);

    // The graph re-reads the same device pointers: new contents, new results.
    const std::vector<float> half{0.5f};
    REQUIRE(cudaMemcpy(scale.get(), half.data(), sizeof(float), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    host_x.assign(n, -1.0f);  // the captured host source is re-read too
    REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(y.host()[3] == (20.0f * 0.5f + 5) * 0.5f - 1);  // 6.5
    CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
    CHECK(cudaGraphDestroy(graph) == cudaSuccess);
    CHECK(cudaGraphDestroy(graph) == cudaErrorInvalidValue);  // already gone
    cudaStreamDestroy(stream);
  }

  TEST_CASE("a stream forked by an event joins the capture and must be joined back") {
    const int n = 64;
    DeviceBuffer<float> a(std::vector<float>(n, 1.0f)), b(std::vector<float>(n, 1.0f));
    DeviceBuffer<float> one(std::vector<float>(n, 1.0f)), two(std::vector<float>{2.0f});
    cudaStream_t main_stream = make_stream(), side = make_stream();
    cudaEvent_t fork, join;
    REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
    auto [graph, err] = capture(main_stream, [&] {
      scale_add(main_stream, a.get(), one.get(), two.get(), n);  // a = 3
      CHECK(cudaEventRecord(fork, main_stream) == cudaSuccess);
      CHECK(cudaEventQuery(fork) == cudaErrorCapturedEvent);
      CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
      CHECK(capture_status(side) == cudaStreamCaptureStatusActive);
      scale_add(side, b.get(), a.get(), two.get(), n);  // b = 2 + 3 = 5
      CHECK(cudaEventRecord(join, side) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(main_stream, join, 0) == cudaSuccess);
      scale_add(main_stream, a.get(), b.get(), two.get(), n);  // a = 6 + 5 = 11
    });
    REQUIRE(err == cudaSuccess);
    CHECK(capture_status(side) == cudaStreamCaptureStatusNone);
    cudaGraphExec_t exec;
    REQUIRE(cudaGraphInstantiate(&exec, graph) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, side) == cudaSuccess);  // any stream may launch it
    REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
    CHECK(a.host()[5] == 11.0f);
    CHECK(b.host()[5] == 5.0f);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);

    // Without the join back, ending the capture fails.
    auto [unjoined, unjoined_err] = capture(main_stream, [&] {
      CHECK(cudaEventRecord(fork, main_stream) == cudaSuccess);
      CHECK(cudaStreamWaitEvent(side, fork, 0) == cudaSuccess);
      scale_add(side, b.get(), a.get(), two.get(), n);
    });
    CHECK(unjoined_err == cudaErrorStreamCaptureUnjoined);
    CHECK(unjoined == nullptr);
    CHECK(capture_status(side) == cudaStreamCaptureStatusNone);
    REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
    CHECK(b.host()[0] == 5.0f);  // recorded, never run
    cudaEventDestroy(fork);
    cudaEventDestroy(join);
    cudaStreamDestroy(main_stream);
    cudaStreamDestroy(side);
  }

  TEST_CASE("a synchronisation or unsafe call during capture invalidates it") {
    DeviceBuffer<float> y(std::vector<float>(8, 1.0f)), x(std::vector<float>(8, 1.0f));
    DeviceBuffer<float> scale(std::vector<float>{1.0f});
    cudaStream_t stream = make_stream(), other = make_stream();
    std::vector<float> host(8);

    auto expect_invalidated = [&](const char* what, auto call, cudaError_t expected) {
      CAPTURE(what);
      auto [graph, err] = capture(stream, [&] {
        scale_add(stream, y.get(), x.get(), scale.get(), 8);
        CHECK(call() == expected);
        CHECK(capture_status(stream) == cudaStreamCaptureStatusInvalidated);
        // Work after the failure is refused, as the real runtime does.
        CHECK(cudaMemsetAsync(y.get(), 0, 4, stream) == cudaErrorStreamCaptureInvalidated);
      });
      CHECK(err == cudaErrorStreamCaptureInvalidated);
      CHECK(graph == nullptr);
      CHECK(capture_status(stream) == cudaStreamCaptureStatusNone);
    };
    expect_invalidated(
        "cudaStreamSynchronize", [&] { return cudaStreamSynchronize(stream); },
        cudaErrorStreamCaptureUnsupported);
    expect_invalidated(
        "cudaStreamQuery", [&] { return cudaStreamQuery(stream); },
        cudaErrorStreamCaptureUnsupported);
    expect_invalidated(
        "cudaDeviceSynchronize", [] { return cudaDeviceSynchronize(); },
        cudaErrorStreamCaptureUnsupported);
    expect_invalidated(
        "blocking cudaMemcpy",
        [&] { return cudaMemcpy(host.data(), y.get(), 8 * sizeof(float), cudaMemcpyDeviceToHost); },
        cudaErrorStreamCaptureUnsupported);
    expect_invalidated(
        "cudaMalloc",
        [] {
          void* p = nullptr;
          return cudaMalloc(&p, 64);
        },
        cudaErrorStreamCaptureUnsupported);
    cudaEvent_t outside;
    REQUIRE(cudaEventCreate(&outside) == cudaSuccess);
    REQUIRE(cudaEventRecord(outside, other) == cudaSuccess);
    expect_invalidated(
        "waiting on an event from outside the capture",
        [&] { return cudaStreamWaitEvent(stream, outside, 0); }, cudaErrorStreamCaptureIsolation);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(y.host()[0] == 1.0f);  // none of the captured launches ran

    // A blocking stream's capture is broken by work on the legacy stream (implicit ordering).
    cudaStream_t blocking;
    REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaMemsetAsync(y.get(), 0, 4, nullptr) == cudaErrorStreamCaptureImplicit);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(blocking, &graph) == cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    cudaEventDestroy(outside);
    cudaStreamDestroy(blocking);
    cudaStreamDestroy(stream);
    cudaStreamDestroy(other);
  }

  TEST_CASE("capture modes: relaxed calls are allowed; another thread is bound by global mode") {
    cudaStream_t stream = make_stream();
    void* p = nullptr;
    // The thread's own relaxed mode allows cudaMalloc during its global capture (what a caching
    // allocator does to grow its pool while a step is captured).
    auto [graph, err] = capture(stream, [&] {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
      CHECK(mode == cudaStreamCaptureModeGlobal);
      CHECK(cudaMalloc(&p, 256) == cudaSuccess);
      REQUIRE(cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess);
    });
    CHECK(err == cudaSuccess);
    REQUIRE(graph != nullptr);
    cudaGraphDestroy(graph);
    CHECK(cudaFree(p) == cudaSuccess);

    // Another thread's cudaMalloc breaks a global capture but not a thread-local one.
    for (const auto mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
      cudaError_t other_thread = cudaSuccess;
      auto [g, e] = capture(
          stream,
          [&] {
            std::thread([&] {
              void* q = nullptr;
              other_thread = cudaMalloc(&q, 64);
              cudaFree(q);
              cudaGetLastError();
            }).join();
          },
          mode);
      if (mode == cudaStreamCaptureModeGlobal) {
        CHECK(other_thread == cudaErrorStreamCaptureUnsupported);
        CHECK(e == cudaErrorStreamCaptureInvalidated);
      } else {
        CHECK(other_thread == cudaSuccess);
        CHECK(e == cudaSuccess);
        cudaGraphDestroy(g);
      }
    }
    // Misuse: the legacy stream cannot capture, a capture cannot begin twice, ending one that
    // never began is an error.
    CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) ==
          cudaErrorStreamCaptureUnsupported);
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
    cudaGraph_t g = nullptr;
    REQUIRE(cudaStreamEndCapture(stream, &g) == cudaSuccess);
    CHECK(cudaStreamEndCapture(stream, &g) == cudaErrorIllegalState);
    cudaGraphDestroy(g);
    cudaGetLastError();
    cudaStreamDestroy(stream);
  }
}
