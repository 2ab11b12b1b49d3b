// CUDA graphs and the caching allocator: a capture's allocations come from a private pool that
// eager work never gets while the graph lives, so replays keep reading and writing their own
// blocks; releasing the pool hands the blocks back to the cache. A whole LeNet-5 training step
// (forward, loss, backward, SGD with momentum) captured once and replayed on later batches trains
// bit for bit like eager steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/cuda/allocator.h>
#include <echelon/cuda/check.h>
#include <echelon/cuda/stream.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/optim.h>
#include <echelon/parallel/deferred_stats.h>
#include <echelon/tensor/ops.h>

#include "tests/support/flat_parameters.h"
#if ECHELON_CUDA_SIM
#include <echelon/cuda/sim/sim.h>
#endif

using namespace echelon;

namespace {

std::vector<float> read_back(const void* device_ptr, size_t n, cudaStream_t stream) {
  std::vector<float> host(n);
  ECH_CUDA_CHECK(
      cudaMemcpyAsync(host.data(), device_ptr, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  ECH_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

// Batch `index`: images (16, 1, 28, 28) in [0, 1) and labels (16) in [0, 10), on cuda:0.
std::pair<Tensor, Tensor> lenet_batch(int64_t index) {
  Generator gen(100 + static_cast<uint64_t>(index));
  const int64_t n = 16;
  Tensor labels = Tensor::empty({n}, kInt64, Device::cpu());
  for (int64_t i = 0; i < n; ++i) labels.data<int64_t>()[i] = (i * 7 + index * 3) % 10;
  return {ops::rand({n, 1, 28, 28}, gen).to(Device::cuda(0)), labels.to(Device::cuda(0))};
}

// One training step; the loss (scalar, on the device) stays on the device.
Tensor train_step(Sequential& model, SGD& sgd, const Tensor& images, const Tensor& labels) {
  const Tensor loss = cross_entropy(model.forward(images), labels);
  backward(loss);
  sgd.step();
  sgd.zero_grad();
  return loss;
}

}  // namespace

TEST_SUITE("graph_gpu") {
  TEST_CASE("a capture allocates from a private pool that eager work never gets") {
    cuda::Stream stream(0);
    const size_t n = 1000, nbytes = n * sizeof(float);
    // Allocated before the capture and freed during it: captured work may have read it.
    void* before = cuda::device_malloc(0, nbytes, stream.get());
    void* input = cuda::device_malloc(0, nbytes, stream.get());  // a static input, lives on
    const std::vector<float> ones(n, 1.0f);
    ECH_CUDA_CHECK(
        cudaMemcpyAsync(input, ones.data(), nbytes, cudaMemcpyHostToDevice, stream.get()));

    const uint64_t pool = cuda::begin_capture_pool(0, stream.get());
    ECH_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    // A temporary (allocated with cudaMalloc inside the capture: it must not invalidate it),
    // freed and reused by the next allocation of the capture: the pool serves its own capture.
    void* temp = cuda::device_malloc(0, nbytes, stream.get());
    ECH_CUDA_CHECK(cudaMemcpyAsync(temp, input, nbytes, cudaMemcpyDeviceToDevice, stream.get()));
    cuda::device_free(0, temp, stream.get());
    void* output = cuda::device_malloc(0, nbytes, stream.get());
    CHECK(output == temp);
    ECH_CUDA_CHECK(cudaMemcpyAsync(output, input, nbytes, cudaMemcpyDeviceToDevice, stream.get()));
    cuda::device_free(0, before, stream.get());
    cudaGraph_t graph = nullptr;
    ECH_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cuda::end_capture_pool(0, pool);
    const cuda::CapturePoolStats held = cuda::capture_pool_stats(0, pool);
    CHECK(held.blocks == 2);       // `output` (live) and the adopted `before` (free)
    CHECK(held.free_blocks == 1);  // `before`

    // Eager allocations of the same size class get neither the pool's live block nor the
    // adopted one.
    void* eager = cuda::device_malloc(0, nbytes, stream.get());
    CHECK(eager != output);
    CHECK(eager != before);
    cudaGraphExec_t exec = nullptr;
    ECH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    const std::vector<float> twos(n, 2.0f);
    for (const auto* values : {&ones, &twos}) {
      ECH_CUDA_CHECK(
          cudaMemcpyAsync(input, values->data(), nbytes, cudaMemcpyHostToDevice, stream.get()));
      ECH_CUDA_CHECK(cudaMemsetAsync(eager, 0, nbytes, stream.get()));  // eager work meanwhile
      ECH_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
      const std::vector<float> got = read_back(output, n, stream.get());
      CHECK(got.front() == values->front());
      CHECK(got.back() == values->back());
    }

    // The graph goes: its blocks return to the cache (the live one once freed).
    ECH_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ECH_CUDA_CHECK(cudaGraphDestroy(graph));
    cuda::release_capture_pool(0, pool, stream.get());
    CHECK(cuda::capture_pool_stats(0, pool).blocks == 0);
    cuda::device_free(0, output, stream.get());
    // Other tests' cached blocks of the size class may come first: take them all.
    std::vector<void*> again;
    for (int i = 0; i < 64; ++i) again.push_back(cuda::device_malloc(0, nbytes, stream.get()));
    const auto reused = [&](void* p) {
      return std::find(again.begin(), again.end(), p) != again.end();
    };
    CHECK(reused(output));
    CHECK(reused(before));
    for (void* p : again) cuda::device_free(0, p, stream.get());
    cuda::device_free(0, eager, stream.get());
    cuda::device_free(0, input, stream.get());
  }

  TEST_CASE("one capture pool at a time per device") {
    cuda::Stream stream(0);
    const uint64_t pool = cuda::begin_capture_pool(0, stream.get());
    CHECK_THROWS_WITH_AS(cuda::begin_capture_pool(0, stream.get()),
                         doctest::Contains("already capturing"), Error);
    CHECK_THROWS_AS(cuda::end_capture_pool(0, pool + 1), Error);
    cuda::end_capture_pool(0, pool);
    cuda::release_capture_pool(0, pool, stream.get());
  }

  TEST_CASE("a captured LeNet-5 training step replays bit for bit like eager steps") {
    const SGDOptions options{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4};
    const int64_t steps = 6, warmup = 2;  // eager steps before the capture (momentum buffers)
    cuda::Stream stream(0);
    const cuda::StreamGuard on_stream(stream);  // the legacy stream cannot be captured
    const parallel::ScopedDeferredTargetChecks no_label_sync;  // label checks stay on the device

    auto eager_model = make_model("lenet5", 1, 10, /*seed=*/5);
    eager_model->to(Device::cuda(0));
    SGD eager_sgd(eager_model->named_parameters(), options);
    std::vector<float> eager_losses;
    for (int64_t i = 0; i < steps; ++i) {
      const auto [images, labels] = lenet_batch(i);
      eager_losses.push_back(train_step(*eager_model, eager_sgd, images, labels).item<float>());
    }

    auto model = make_model("lenet5", 1, 10, /*seed=*/5);
    model->to(Device::cuda(0));
    SGD sgd(model->named_parameters(), options);
    std::vector<float> losses;
    for (int64_t i = 0; i < warmup; ++i) {
      const auto [images, labels] = lenet_batch(i);
      losses.push_back(train_step(*model, sgd, images, labels).item<float>());
    }
    // Static inputs: every replay reads its batch from these.
    Tensor images = Tensor::empty({16, 1, 28, 28}, kFloat32, Device::cuda(0));
    Tensor labels = Tensor::empty({16}, kInt64, Device::cuda(0));
    const uint64_t pool = cuda::begin_capture_pool(0, stream.get());
    ECH_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    const Tensor captured_loss = train_step(*model, sgd, images, labels);
    cudaGraph_t graph = nullptr;
    ECH_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
    cuda::end_capture_pool(0, pool);
    cudaGraphExec_t exec = nullptr;
    ECH_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int64_t i = warmup; i < steps; ++i) {
      const auto [batch_images, batch_labels] = lenet_batch(i);
      ops::copy_(images, batch_images);
      ops::copy_(labels, batch_labels);
      ECH_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
      losses.push_back(captured_loss.item<float>());
    }
    CHECK(losses == eager_losses);
    CHECK(losses.front() != losses.back());  // it trained: a replay is not a repeat
    CHECK(test::flat_parameters(*model) == test::flat_parameters(*eager_model));
    ECH_CUDA_CHECK(cudaGraphExecDestroy(exec));
    ECH_CUDA_CHECK(cudaGraphDestroy(graph));
    cuda::release_capture_pool(0, pool, stream.get());
  }
}

TEST_SUITE("graph_gpu") {
  TEST_CASE("a scalar root's seed on a GPU: filled once, shared read-only, never written") {
    const Device gpu = Device::cuda(0);
    Tensor x = Tensor::from_vector<float>({1.0f, -2.0f, 3.0f}, {3}, gpu);
    x.set_requires_grad(true);
    const std::vector<float> want = {2.0f, -4.0f, 6.0f};
    // The kernels of a forward and backward of sum(x * x); the hook, if any, on the loss.
    const auto run = [&](const TensorHook& hook) {
#if ECHELON_CUDA_SIM
      ECH_CUDA_CHECK(cudaDeviceSynchronize());  // the emulator counts a kernel when it runs
      const uint64_t before = cudasim::stats().kernels;
#endif
      x.zero_grad();
      Tensor loss = sum(x * x);
      if (hook) loss.register_hook(hook);
      backward(loss);
#if ECHELON_CUDA_SIM
      ECH_CUDA_CHECK(cudaDeviceSynchronize());
      return cudasim::stats().kernels - before;
#else
      return uint64_t{0};
#endif
    };
    run({});  // the first backward on this device fills the shared seed
    [[maybe_unused]] const uint64_t shared_seed = run({});
    CHECK(x.grad().cpu().to_vector<float>() == want);
    // A root with a hook gets a seed of its own: one fill kernel more.
    [[maybe_unused]] const uint64_t own_seed = run([](const Tensor&) { return Tensor(); });
    CHECK(x.grad().cpu().to_vector<float>() == want);
#if ECHELON_CUDA_SIM
    CHECK(own_seed == shared_seed + 1);
#endif
    // Written in place by a hook, that seed changes this backward only.
    run([](const Tensor& g) {
      Tensor written = g;
      ops::fill_(written, 7.0);
      return Tensor();
    });
    CHECK(x.grad().cpu().to_vector<float>() == std::vector<float>{14.0f, -28.0f, 42.0f});
    run({});
    CHECK(x.grad().cpu().to_vector<float>() == want);
    // A retained root gradient is a copy: writing it leaves the shared seed at 1.
    Tensor loss = sum(x * x);
    loss.retain_grad();
    backward(loss);
    Tensor retained = loss.grad();
    ops::fill_(retained, 5.0);
    run({});
    CHECK(x.grad().cpu().to_vector<float>() == want);
  }

  TEST_CASE("cross_entropy on CUDA: a backward from the loss hands on the forward's gradient") {
    // LeNet-5's head (128 x 10, one block): the forward's kernel writes the logits' gradient for a
    // unit loss gradient; the backward from the loss (the shared seed) then launches nothing of
    // its own, bit for bit cross_entropy_backward(1). A retained graph's second backward and a
    // weighted loss run the backward kernel, to its bits.
    const Device gpu = Device::cuda(0);
    Generator gen(5);
    const Tensor logits0 = (ops::rand({128, 10}, gen) * 8.0 - 4.0).to(gpu);
    std::vector<int64_t> labels(128);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i * 7 % 10);
    const Tensor target = Tensor::from_vector(labels, {128}).to(gpu);
    Tensor log_probs;
    ops::cross_entropy(logits0, target, &log_probs);
    const auto backward_of = [&](double weight) {
      return ops::cross_entropy_backward(Tensor::full({}, weight, kFloat32, gpu), log_probs, target)
          .cpu()
          .to_vector<float>();
    };
    Tensor logits = logits0.clone();
    logits.set_requires_grad(true);
    backward(cross_entropy(logits, target));  // the first backward on a device fills the seed
    logits.zero_grad();
    Tensor loss = cross_entropy(logits, target);
    const auto run = [&] { backward(loss, Tensor(), /*retain_graph=*/true); };
#if ECHELON_CUDA_SIM
    ECH_CUDA_CHECK(cudaDeviceSynchronize());
    const uint64_t before = cudasim::stats().kernels;
    run();
    ECH_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(cudasim::stats().kernels == before);
#else
    run();
#endif
    CHECK(logits.grad().cpu().to_vector<float>() == backward_of(1.0));
    logits.zero_grad();
    run();  // the forward's gradient was handed on once: now the kernel
    CHECK(logits.grad().cpu().to_vector<float>() == backward_of(1.0));
    logits.zero_grad();
    backward(cross_entropy(logits, target) * 2.0);
    CHECK(logits.grad().cpu().to_vector<float>() == backward_of(2.0));
  }
}
