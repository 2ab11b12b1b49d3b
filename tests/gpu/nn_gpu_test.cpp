// GPU tests of the neural-network families beyond the parity sweep (which compares every nn
// forward/backward case, ours and cuDNN, against the CPU twin): the nn families must all pass
// in GPU mode, errors raised on the device path, bitwise dropout masks, in-place updates, the
// chunked columns path, and cuDNN vs ours on a training-sized layer.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/cuda/cudnn/conv.h>
#include <echelon/cuda/kernels/conv.h>
#include <echelon/cuda/kernels/loss.h>
#include <echelon/tensor/ops.h>
#include "tests/support/parity.h"
#include "tests/support/setting_scope.h"
#include "tests/support/sim_kernels.h"
#if ECHELON_CUDA_SIM
#include <echelon/cuda/sim/sim.h>
#endif

namespace echelon {
namespace {

Tensor random_on(const Shape& shape, uint64_t seed, Device device) {
  Generator gen(seed);
  return ops::rand(shape, gen).to(device);  // drawn on CPU: identical values on both devices
}

// Uniform in [-1, 1), drawn on CPU (identical values on both devices). Zero-mean on purpose: a
// sum of K such products is a random walk of size ~sqrt(K), where all-positive inputs would make
// it ~K and push the comparison to the float32 limit (see sum_tolerance).
Tensor signed_on(const Shape& shape, uint64_t seed, Device device) {
  const parity::InputSpec spec{shape, kFloat32, -1.0, 1.0, parity::Layout::Contiguous, {}};
  return parity::make_inputs({spec}, seed, Device::cpu())[0].to(device);
}

// Allowed difference between two float32 results that each sum K zero-mean terms of magnitude at
// most max_term, accumulated in different orders. The sums are ~sqrt(K) * max_term in size, and
// accumulating K terms in float32 costs a relative error of about sqrt(K) * u (u = 2^-24, one
// rounding of the partial sum per term). Four times that leaves room for two implementations'
// errors; a single wrong term (an error of ~max_term) is still far above it.
double sum_tolerance(int64_t k, double max_term) {
  const double u = std::ldexp(1.0, -24);
  const double root_k = std::sqrt(static_cast<double>(k));
  return 4.0 * (root_k * max_term) * (root_k * u);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.cpu().contiguous().to_vector<float>();
  const std::vector<float> y = b.cpu().contiguous().to_vector<float>();
  REQUIRE(x.size() == y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - y[i]));
  return worst;
}

#if ECHELON_WITH_CUDNN
// cuDNN convolutions in deterministic mode for a scope; restores the defaults even on a throw.
struct DeterministicCudnn {
  DeterministicCudnn() {
    ops::set_conv_impl(ops::ConvImpl::Cudnn);
    ops::set_deterministic(true);
  }
  ~DeterministicCudnn() {
    ops::set_deterministic(false);
    ops::set_conv_impl(ops::ConvImpl::Ours);
  }
  DeterministicCudnn(const DeterministicCudnn&) = delete;
  DeterministicCudnn& operator=(const DeterministicCudnn&) = delete;
};
#endif

// A fused layer + ReLU node (`name`, as fused(x, w, b)) against --no-fuse's composition: the
// output (clamped) and the three gradients for gy, bit for bit.
void check_fused_equals_composed(
    const std::string& name,
    const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& fused_fn,
    const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& gy) {
  std::vector<std::vector<Tensor>> got;
  for (const bool fuse : {true, false}) {
    const test::SettingScope<bool> fused(ops::fused_ops, ops::set_fused_ops, fuse);
    Tensor x = x0.clone(), w = w0.clone(), b = b0.clone();
    for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
    const Tensor y = fused_fn(x, w, b);
    REQUIRE(y.grad_fn());
    CHECK(y.grad_fn()->name() == (fuse ? name : "relu"));
    backward(y, gy);
    got.push_back({y, x.grad(), w.grad(), b.grad()});
  }
  CHECK(max_abs_diff(got[0][0], ops::relu(got[0][0])) == 0.0);  // clamped
  for (size_t i = 0; i < got[0].size(); ++i) {
    CAPTURE(i);
    CHECK(max_abs_diff(got[0][i], got[1][i]) == 0.0);
  }
}
// a and b (float32) hold the same bits: +0 and -0 differ.
bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.cpu().contiguous().to_vector<float>();
  const std::vector<float> y = b.cpu().contiguous().to_vector<float>();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), [](float u, float v) {
           return std::bit_cast<uint32_t>(u) == std::bit_cast<uint32_t>(v);
         });
}
}  // namespace

TEST_SUITE("nn_gpu") {
  TEST_CASE("parity: every conv/pool/norm/loss/optim case matches its CPU twin") {
    int ran = 0;
    for (const char* family : {"conv", "pool", "norm", "loss", "optim"}) {
      const auto results = parity::run_gpu_parity(family);
      for (const auto& r : results) {
        if (r.skipped) continue;
        ++ran;
        CHECK_MESSAGE(r.ok, r.name, " [", r.variant, "]: ", r.detail);
      }
    }
    CHECK(ran >= 60);  // 60 nn cases, plus the cuDNN variants when built with cuDNN
  }

  TEST_CASE(
      "max_pool2d_backward with the window on CUDA: the twin's bits; the scatter's if disjoint") {
    // The gather adds each input's terms from 0 in ascending (oh, ow), the order of the twin's
    // scatter: bit for bit, overlapping windows included. Where no two windows share an input,
    // the atomic scatter adds one term to 0 as well. Every 7th gradient is -0 (0 + -0 is +0).
    const Device cuda = Device::cuda(0);
    Pool2dGeometry floor2, by3, ceil3, dense;  // 2x2 stride 2: the disjoint kernel's path
    by3.kernel_h = by3.kernel_w = by3.stride_h = by3.stride_w = 3;  // disjoint, rows left over
    ceil3.kernel_h = ceil3.kernel_w = 3, ceil3.stride_h = ceil3.stride_w = 2;
    ceil3.pad_h = ceil3.pad_w = 1, ceil3.ceil_mode = true;  // AlexNet-like, overlapping
    dense.kernel_h = dense.kernel_w = 3, dense.stride_h = dense.stride_w = 1;  // 9 windows a pixel
    const std::pair<Pool2dGeometry, bool> windows[] = {
        {floor2, true}, {by3, true}, {ceil3, false}, {dense, false}};
    const Tensor x = signed_on({3, 5, 11, 9}, 5, cuda);
    for (const auto& named : windows) {  // no structured binding: clang 14 cannot capture one
      const Pool2dGeometry& window = named.first;
      const bool disjoint = named.second;
      CAPTURE(window.kernel_h);
      CAPTURE(window.stride_h);
      Tensor argmax, relu_argmax;
      ops::max_pool2d(x, window, &argmax);
      const Tensor y = ops::max_pool2d(x, window, &relu_argmax, /*relu_first=*/true);
      std::vector<float> g = signed_on(y.shape(), 6, Device::cpu()).to_vector<float>();
      for (size_t i = 0; i < g.size(); i += 7) g[i] = -0.0f;
      const Tensor grad = Tensor::from_vector<float>(g, y.shape()).to(cuda);
      for (const bool relu : {false, true}) {
        CAPTURE(relu);
        const Tensor& indices = relu ? relu_argmax : argmax;
        const Tensor gathered =
            ops::max_pool2d_backward(grad, indices, x.shape(), window, relu ? y : Tensor());
        Tensor twin;
        {
          const test::SettingScope<ops::CpuKernels> naive(ops::cpu_kernels, ops::set_cpu_kernels,
                                                          ops::CpuKernels::Naive);
          twin = ops::max_pool2d_backward(grad.cpu(), indices.cpu(), x.shape(), window,
                                          relu ? y.cpu() : Tensor());
        }
        CHECK(same_bits(gathered, twin));
        if (disjoint) {
          const Tensor masked = relu ? ops::unary_backward(UnaryOp::Relu, grad, y, y) : grad;
          CHECK(same_bits(gathered, ops::max_pool2d_backward(masked, indices, x.shape())));
        }
      }
      // The fused node (one kernel) against --no-fuse (ReLU's backward, then the gather).
      std::vector<Tensor> grads;
      for (const bool fuse : {true, false}) {
        const test::SettingScope<bool> fused(ops::fused_ops, ops::set_fused_ops, fuse);
        Tensor leaf = x.clone();
        leaf.set_requires_grad(true);
        backward(relu_max_pool2d(leaf, window), grad);
        grads.push_back(leaf.grad());
      }
      CHECK(same_bits(grads[0], grads[1]));
    }
  }

  TEST_CASE("cross_entropy on CUDA: a bad target throws naming the index and class count") {
    const Device cuda = Device::cuda(0);
    const Tensor logits = random_on({4, 6}, 1, cuda);
    const Tensor target = Tensor::from_vector<int64_t>({0, 5, 6, 1}, {4}, cuda);
    try {
      ops::cross_entropy(logits, target, nullptr);
      FAIL("expected an echelon::Error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("target[2] = 6") != std::string::npos);
      CHECK(what.find("[0, 6)") != std::string::npos);
    }
  }

  TEST_CASE("cross_entropy with deferred target checks: no host synchronisation in the step") {
    struct Deferred {  // restores the default even when a check throws
      Deferred() { cuda::set_deferred_target_checks(true); }
      ~Deferred() { cuda::set_deferred_target_checks(false); }
    } deferred;
    const Device cuda = Device::cuda(0);
    const Tensor logits = random_on({4, 7}, 3, cuda);
    const Tensor good = Tensor::from_vector<int64_t>({0, 5, 6, 1}, {4}, cuda);
    const Tensor bad = Tensor::from_vector<int64_t>({0, 5, 9, 1}, {4}, cuda);
    const Tensor grad_loss = Tensor::from_vector<float>({1.0f}, {}, cuda);
    cuda::check_deferred_target_errors();  // nothing recorded yet
#if ECHELON_CUDA_SIM
    const uint64_t syncs = cudasim::host_synchronizations();
#endif
    Tensor log_probs;
    const Tensor loss = ops::cross_entropy(logits, good, &log_probs);
    const Tensor grad = ops::cross_entropy_backward(grad_loss, log_probs, good);
    ops::cross_entropy(logits, bad, nullptr);  // recorded on the device, not thrown here
#if ECHELON_CUDA_SIM
    CHECK(cudasim::host_synchronizations() == syncs);
#endif
    // The values are those of the synchronous path.
    cuda::set_deferred_target_checks(false);
    Tensor sync_log_probs;
    const Tensor sync_loss = ops::cross_entropy(logits, good, &sync_log_probs);
    CHECK(loss.item<float>() == sync_loss.item<float>());
    CHECK(grad.cpu().to_vector<float>() ==
          ops::cross_entropy_backward(grad_loss, sync_log_probs, good).cpu().to_vector<float>());
    // After a synchronisation the bad target is reported once, with the synchronous message.
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    try {
      cuda::check_deferred_target_errors();
      FAIL("expected an echelon::Error");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("target[2] = 9") != std::string::npos);
      CHECK(what.find("[0, 7)") != std::string::npos);
    }
    cuda::check_deferred_target_errors();  // cleared
  }

  TEST_CASE("cross_entropy counts the step's statistics: step_statistics' values, in one kernel") {
    // Logits with ties (rows of equal values: the first index wins), a NaN (it counts as the
    // largest) and targets hitting about a third of the argmaxes; one block (128 x 10, 100 x 33,
    // 16 x 120) and a block per row (2000 x 10, where step_statistics runs after the loss). Both
    // the correct count and the guard equal step_statistics' on the same loss; a NaN loss turns
    // the guard NaN. The one-block loss with its statistics is one launch.
    const Device gpu = Device::cuda(0);
    for (const std::array<int64_t, 2> shape :
         {std::array<int64_t, 2>{128, 10}, std::array<int64_t, 2>{100, 33},
          std::array<int64_t, 2>{16, 120}, std::array<int64_t, 2>{2000, 10}}) {
      const int64_t n = shape[0], classes = shape[1];
      CAPTURE(n);
      std::vector<float> values = signed_on({n, classes}, 9, Device::cpu()).to_vector<float>();
      for (int64_t c = 0; c < classes; ++c) values[static_cast<size_t>(2 * classes + c)] = 0.5f;
      std::vector<int64_t> labels(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = (5 * i + 1) % classes;
      labels[2] = 0;  // the tied row's first index
      for (const bool with_nan : {false, true}) {
        CAPTURE(with_nan);
        if (with_nan) values[static_cast<size_t>(classes + 3)] = std::nanf("");
        const Tensor logits = Tensor::from_vector<float>(values, {n, classes}, gpu);
        const Tensor target = Tensor::from_vector<int64_t>(labels, {n}, gpu);
        ops::StepStatistics fused{Tensor::zeros({}, kFloat32, gpu),
                                  Tensor::empty({}, kFloat32, gpu)};
        Tensor loss;
        [[maybe_unused]] const auto forward = [&] {
          loss = ops::cross_entropy(logits, target, nullptr, nullptr, &fused);
        };
#if ECHELON_CUDA_SIM
        const uint64_t kernels = test::kernels_of(forward);
        if (cuda::cross_entropy_one_block_fits(n, classes)) CHECK(kernels == 1u);
#else
        forward();
#endif
        Tensor guard = Tensor::zeros({}, kFloat32, gpu), correct = Tensor::empty({}, kFloat32, gpu);
        ops::step_statistics(logits, target, loss, guard, correct);
        CHECK(fused.correct.item<float>() == correct.item<float>());
        CHECK(correct.item<float>() >= 1.0f);
        CHECK(std::isnan(fused.guard.item<float>()) == with_nan);
        CHECK(std::isnan(guard.item<float>()) == with_nan);
        if (!with_nan) CHECK(fused.guard.item<float>() == 0.0f);
      }
    }
  }

  TEST_CASE("cross_entropy's two CUDA paths: the CPU twin's values, the first bad row of several") {
    // One block (LeNet-5's batch: 4 lanes a row; 33 classes: 16 lanes, 4 passes; 120 classes: a
    // warp a row) and a block per row (5 x 1001; 2000 rows): log-probabilities and loss against
    // the CPU twin, then two bad targets, the later one first in the data, synchronous and
    // deferred: both name the first.
    struct Shape2 {
      int64_t n, classes;
      bool one_block;
    };
    for (const Shape2 s : {Shape2{128, 10, true}, Shape2{100, 33, true}, Shape2{16, 120, true},
                           Shape2{5, 1001, false}, Shape2{2000, 10, false}}) {
      CAPTURE(s.n);
      CAPTURE(s.classes);
      CHECK(cuda::cross_entropy_one_block_fits(s.n, s.classes) == s.one_block);
      const Device gpu = Device::cuda(0);
      const Tensor logits = signed_on({s.n, s.classes}, 5, Device::cpu()),
                   gpu_logits = logits.to(gpu);
      std::vector<int64_t> labels(static_cast<size_t>(s.n));
      for (int64_t i = 0; i < s.n; ++i) labels[static_cast<size_t>(i)] = (7 * i + 3) % s.classes;
      const Tensor target = Tensor::from_vector<int64_t>(labels, {s.n});
      Tensor cpu_log_probs, gpu_log_probs;
      const float cpu_loss = ops::cross_entropy(logits, target, &cpu_log_probs).item<float>();
      const float gpu_loss =
          ops::cross_entropy(gpu_logits, target.to(gpu), &gpu_log_probs).item<float>();
      CHECK(gpu_loss == doctest::Approx(cpu_loss).epsilon(1e-6));
      const std::vector<float> want = cpu_log_probs.to_vector<float>(),
                               got = gpu_log_probs.cpu().to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i)
        REQUIRE(got[i] == doctest::Approx(want[i]).epsilon(1e-6));

      const int64_t first = s.n / 3, later = s.n - 2;
      labels[static_cast<size_t>(later)] = -1;
      labels[static_cast<size_t>(first)] = s.classes;
      const Tensor bad = Tensor::from_vector<int64_t>(labels, {s.n}, gpu);
      const std::string named = "target[" + std::to_string(first) +
                                "] = " + std::to_string(s.classes) +
                                " is not a class index in [0, " + std::to_string(s.classes) + ")";
      try {
        ops::cross_entropy(gpu_logits, bad, nullptr);
        FAIL("expected an echelon::Error");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find(named) != std::string::npos);
      }
      cuda::set_deferred_target_checks(true);
      const Tensor nan_loss = ops::cross_entropy(gpu_logits, bad, nullptr);
      cuda::set_deferred_target_checks(false);
      CHECK(std::isnan(nan_loss.item<float>()));  // synchronises: the record is written
      try {
        cuda::check_deferred_target_errors();
        FAIL("expected an echelon::Error");
      } catch (const Error& e) {
        CHECK(std::string(e.what()).find(named) != std::string::npos);
      }
    }
  }

  TEST_CASE("mean's backward on CUDA (the broadcast gradient read in place) equals the CPU's") {
    // ResNet's global average pooling, and a mean over dims 0 and 2 without keepdim.
    for (const auto& [dims, keepdim] : {std::pair<std::vector<int64_t>, bool>{{2, 3}, true},
                                        std::pair<std::vector<int64_t>, bool>{{0, 2}, false}}) {
      std::vector<std::vector<float>> grads;
      for (const Device device : {Device::cpu(), Device::cuda(0)}) {
        Tensor x = signed_on({3, 5, 4, 6}, 11, device);
        x.set_requires_grad(true);
        const Tensor y = mean(x, dims, keepdim);
        backward(sum(y * signed_on(y.shape(), 12, device)));
        grads.push_back(x.grad().cpu().to_vector<float>());
      }
      CHECK(grads[0] == grads[1]);
    }
  }

  TEST_CASE("dropout mask: CUDA equals CPU bitwise for the same generator state") {
    Generator a(99), b(99);
    const Tensor cpu_mask = ops::dropout_mask({7, 13, 31}, 0.4, a, Device::cpu());
    const Tensor gpu_mask = ops::dropout_mask({7, 13, 31}, 0.4, b, Device::cuda(0));
    CHECK(cpu_mask.to_vector<float>() == gpu_mask.cpu().to_vector<float>());
    CHECK(a.offset() == b.offset());
  }

  TEST_CASE("sgd_steps_ on CUDA: one launch per 384 parameters, sgd_step_'s bits on each") {
    // 53 parameters (44 nonempty: the small list, one launch) and 470 (391 nonempty: two launches
    // of the large list, 384 + 7) of sizes 0 to 5000 (one and several 2048-element blocks),
    // Nesterov with weight decay and an average, the rate from a device scalar, two steps (the
    // first starts the buffers): every parameter, buffer and average equal to sgd_step_ run on
    // each, bit for bit; a non-finite guard leaves everything unchanged.
    const Device gpu = Device::cuda(0);
    const SGDOptions o{
        .lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true, .ema_decay = 0.9};
    const int64_t sizes[] = {0, 1, 7, 2048, 2049, 5000};
    const Tensor lr = Tensor::scalar(0.03, kFloat64).to(gpu);
    for (const int count : {53, 470}) {
      CAPTURE(count);
      std::vector<Tensor> list[3], single[3], grads;  // [param, buffer, average]
      for (int i = 0; i < count; ++i) {
        const int64_t n = sizes[i % 6];
        const Tensor p = signed_on({n}, 100 + i, gpu);
        grads.push_back(signed_on({n}, 200 + i, gpu));
        list[0].push_back(p.clone()), single[0].push_back(p.clone());
        list[1].push_back(Tensor::empty({n}, kFloat32, gpu));
        single[1].push_back(Tensor::empty({n}, kFloat32, gpu));
        list[2].push_back(p.clone()), single[2].push_back(p.clone());
      }
      for (const bool first : {true, false}) {
        [[maybe_unused]] const auto steps = [&] {
          ops::sgd_steps_(list[0], grads, list[1], o, first, Tensor(), lr, list[2]);
        };
#if ECHELON_CUDA_SIM
        CHECK(test::kernels_of(steps) == (count == 53 ? 1u : 2u));
#else
        steps();
#endif
        for (size_t i = 0; i < grads.size(); ++i)
          ops::sgd_step_(single[0][i], grads[i], single[1][i], o, first, Tensor(), lr,
                         single[2][i]);
      }
      for (int k = 0; k < 3; ++k)
        for (size_t i = 0; i < grads.size(); ++i)
          CHECK_MESSAGE(
              list[k][i].cpu().to_vector<float>() == single[k][i].cpu().to_vector<float>(),
              "tensor ", k, " of parameter ", i);
      const std::vector<float> before = list[0][4].cpu().to_vector<float>();
      const Tensor nan_guard = Tensor::scalar(std::nanf(""), kFloat32).to(gpu);
      ops::sgd_steps_(list[0], grads, list[1], o, false, nan_guard, lr, list[2]);
      CHECK(list[0][4].cpu().to_vector<float>() == before);
    }
    std::vector<Tensor> params{signed_on({3}, 1, gpu)}, grads{signed_on({3}, 2, gpu)};
    CHECK_THROWS_WITH_AS(ops::sgd_steps_(params, grads, {}, o, false),
                         doctest::Contains("1 parameters but 1 gradients, 0 momentum buffers"),
                         Error);
  }

  TEST_CASE("batch_norm_train on CUDA updates the running statistics in place") {
    const Device cuda = Device::cuda(0);
    const Tensor x = random_on({8, 3, 5, 7}, 2, cuda);
    Tensor rm = Tensor::zeros({3}, kFloat32, cuda), rv = Tensor::ones({3}, kFloat32, cuda);
    Tensor rm_cpu = Tensor::zeros({3}), rv_cpu = Tensor::ones({3});
    ops::batch_norm_train(x, Tensor(), Tensor(), rm, rv, 0.1, 1e-5);
    ops::batch_norm_train(x.cpu(), Tensor(), Tensor(), rm_cpu, rv_cpu, 0.1, 1e-5);
    CHECK(max_abs_diff(rm, rm_cpu) < 1e-6);
    CHECK(max_abs_diff(rv, rv_cpu) < 1e-6);
    CHECK(rm.cpu().to_vector<float>()[0] > 0.01f);  // rand is in [0, 1): the mean moved
  }

  TEST_CASE("conv2d ours: several column chunks give the same result as one") {
    // 130 images of 64x34x34 with a 3x3 kernel: 64*9*32*32*4 B = 2.25 MiB of columns per image,
    // so the 256 MiB columns budget splits the batch into chunks. The emulation build has a
    // 1 MiB budget (cuda/kernels/conv.cu): 13 images of 16x18x18 = 144 KiB each, chunks of 7.
#if ECHELON_CUDA_SIM
    const int64_t n = 13, c = 16, hw = 18;
#else
    const int64_t n = 130, c = 64, hw = 34;
#endif
    const Device cuda = Device::cuda(0);
    const Tensor x = signed_on({n, c, hw, hw}, 3, cuda), w = signed_on({16, c, 3, 3}, 4, cuda);
    const double tol = sum_tolerance(c * 3 * 3, 1.0);  // each output: C*KH*KW products
    const Conv2dGeometry k3{.kernel_h = 3, .kernel_w = 3};
    ops::set_conv_impl(ops::ConvImpl::Ours);
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::Im2colGemm);  // the path with columns
    const Tensor y = ops::conv2d(x, w, Tensor(), k3);
    const Tensor y_tail = ops::conv2d(x.narrow(0, n - 10, 10).contiguous(), w, Tensor(), k3);
    cuda::set_conv_algorithm(cuda::ConvAlgorithm::ImplicitGemm);
    CHECK(max_abs_diff(y.narrow(0, n - 10, 10), y_tail) <= tol);
    // The naive twin: the CPU fast path takes Winograd F(4x4) on this 16x16 output, whose rounding
    // is larger than a direct sum's (conv_winograd43.h).
    const test::SettingScope<ops::CpuKernels> twin(ops::cpu_kernels, ops::set_cpu_kernels,
                                                   ops::CpuKernels::Naive);
    const Tensor y_cpu = ops::conv2d(x.narrow(0, n - 5, 5).cpu(), w.cpu(), Tensor(), k3);
    CHECK(max_abs_diff(y.narrow(0, n - 5, 5).contiguous(), y_cpu) <= tol);
  }

  TEST_CASE("conv2d_relu on CUDA: the fused node equals --no-fuse bit for bit, both algorithms") {
    // The same convolution sums either way; the clamp and the mask are exact and the bias
    // gradient adds the same terms in the same order, so every output is bit-identical.
    const Device cuda = Device::cuda(0);
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 3, g.stride_h = 2, g.pad_h = g.pad_w = 1;
    const Tensor x0 = signed_on({3, 9, 11, 9}, 5, cuda), w0 = signed_on({7, 9, 3, 3}, 6, cuda);
    const Tensor b0 = signed_on({7}, 7, cuda), gy = signed_on({3, 7, 6, 9}, 8, cuda);
    for (const cuda::ConvAlgorithm algorithm :
         {cuda::ConvAlgorithm::ImplicitGemm, cuda::ConvAlgorithm::Im2colGemm}) {
      CAPTURE(algorithm == cuda::ConvAlgorithm::ImplicitGemm);
      const test::SettingScope<cuda::ConvAlgorithm> scope(cuda::conv_algorithm,
                                                          cuda::set_conv_algorithm, algorithm);
      check_fused_equals_composed(
          "conv2d_relu",
          [&g](const Tensor& x, const Tensor& w, const Tensor& b) {
            return conv2d_relu(x, w, b, g);
          },
          x0, w0, b0, gy);
    }
  }

  TEST_CASE("linear_relu on CUDA: the fused node equals --no-fuse bit for bit") {
    // LeNet-5's 400 -> 120 (the column kernel's float4 path: 120 % 4 == 0) and 84 -> 10 (the
    // scalar path), at batches that take one row chunk and several.
    const Device cuda = Device::cuda(0);
    // Not a structured binding: clang 14's CAPTURE cannot take one.
    for (const std::array<int64_t, 3>& shape :
         {std::array<int64_t, 3>{128, 400, 120}, std::array<int64_t, 3>{3, 84, 10},
          std::array<int64_t, 3>{1000, 37, 12}}) {
      const int64_t rows = shape[0], in = shape[1], out = shape[2];
      CAPTURE(rows);
      const Tensor x0 = signed_on({rows, in}, 5, cuda), w0 = signed_on({out, in}, 6, cuda);
      const Tensor b0 = signed_on({out}, 7, cuda), gy = signed_on({rows, out}, 8, cuda);
      check_fused_equals_composed("linear_relu", linear_relu, x0, w0, b0, gy);
    }
  }

#if ECHELON_WITH_CUDNN
  TEST_CASE("conv2d: cuDNN and ours agree on a VGG-sized layer, forward and backward") {
    const Device cuda = Device::cuda(0);
    const Tensor x = signed_on({16, 64, 32, 32}, 5, cuda), w = signed_on({128, 64, 3, 3}, 6, cuda);
    const Tensor b = signed_on({128}, 7, cuda), g = signed_on({16, 128, 32, 32}, 8, cuda);
    Conv2dGeometry p;
    p.kernel_h = p.kernel_w = 3;
    p.pad_h = p.pad_w = 1;
    ops::set_conv_impl(ops::ConvImpl::Cudnn);
    const Tensor y_cudnn = ops::conv2d(x, w, b, p);
    const auto grads_cudnn = ops::conv2d_backward(g, x, w, true, true, p);
    ops::set_conv_impl(ops::ConvImpl::Ours);
    const Tensor y_ours = ops::conv2d(x, w, b, p);
    const auto grads_ours = ops::conv2d_backward(g, x, w, true, true, p);
    // Terms per output (all inputs in [-1, 1), so every term is at most 1 in magnitude):
    CHECK(max_abs_diff(y_cudnn, y_ours) <= sum_tolerance(64 * 9 + 1, 1.0));  // C*KH*KW, bias
    CHECK(max_abs_diff(grads_cudnn.input, grads_ours.input) <= sum_tolerance(128 * 9, 1.0));
    CHECK(max_abs_diff(grads_cudnn.weight, grads_ours.weight) <=
          sum_tolerance(16 * 32 * 32, 1.0));  // N*OH*OW
    CHECK(max_abs_diff(grads_cudnn.bias, grads_ours.bias) <= sum_tolerance(16 * 32 * 32, 1.0));
  }

  TEST_CASE("conv2d cuDNN, deterministic mode: backward twice is bitwise identical") {
    // Backward filter/data have non-deterministic algorithms (algorithm 0 of each accumulates with
    // atomics) that the heuristics may rank first; deterministic mode must pick another. The layer
    // is large enough that atomic accumulation orders would differ from run to run.
    const Device cuda = Device::cuda(0);
    const Tensor x = signed_on({32, 64, 28, 28}, 9, cuda), w = signed_on({64, 64, 3, 3}, 10, cuda);
    const Tensor g = signed_on({32, 64, 28, 28}, 11, cuda);
    Conv2dGeometry p;
    p.kernel_h = p.kernel_w = 3;
    p.pad_h = p.pad_w = 1;
    std::vector<ops::Conv2dGrads> runs;
    {
      const DeterministicCudnn scope;
      for (int i = 0; i < 3; ++i) runs.push_back(ops::conv2d_backward(g, x, w, true, true, p));
    }
    for (int i = 1; i < 3; ++i) {
      CHECK(runs[i].weight.cpu().to_vector<float>() == runs[0].weight.cpu().to_vector<float>());
      CHECK(runs[i].input.cpu().to_vector<float>() == runs[0].input.cpu().to_vector<float>());
      CHECK(runs[i].bias.cpu().to_vector<float>() == runs[0].bias.cpu().to_vector<float>());
    }
    // And it computes the convolution's gradient, not just something reproducible.
    const auto ours = ops::conv2d_backward(g, x, w, true, true, p);
    CHECK(max_abs_diff(runs[0].weight, ours.weight) <= sum_tolerance(32 * 28 * 28, 1.0));
    CHECK(max_abs_diff(runs[0].input, ours.input) <= sum_tolerance(64 * 9, 1.0));
  }

  TEST_CASE("conv2d cuDNN, benchmark policy (--autotune): times the candidates once per shape") {
    // A shape no other case uses, so its plans are new whatever ran before.
    const Device cuda = Device::cuda(0);
    const Tensor x = signed_on({8, 24, 20, 18}, 21, cuda), w = signed_on({40, 24, 3, 3}, 22, cuda);
    const Tensor b = signed_on({40}, 23, cuda), g = signed_on({8, 40, 20, 18}, 24, cuda);
    Conv2dGeometry p;
    p.kernel_h = p.kernel_w = 3;
    p.pad_h = p.pad_w = 1;
    const auto run = [&] {
      return std::pair(ops::conv2d(x, w, b, p), ops::conv2d_backward(g, x, w, true, true, p));
    };
    const size_t before = cudnn::benchmark_picks().size();
    std::pair<Tensor, ops::Conv2dGrads> tuned, again;
    {
      const test::SettingScope impl(ops::conv_impl, ops::set_conv_impl, ops::ConvImpl::Cudnn);
      const test::SettingScope tune(ops::conv_autotune, ops::set_conv_autotune, true);
      tuned = run();
      const std::vector<cudnn::BenchmarkPick> picks = cudnn::benchmark_picks();
      REQUIRE(picks.size() == before + 3);  // forward, grad input, grad weight
      for (size_t i = before; i < picks.size(); ++i) {
        const cudnn::BenchmarkPick& pick = picks[i];
        CAPTURE(pick.direction);
        CHECK(pick.geometry.c == 24);
        CHECK(pick.geometry.o == 40);
        CHECK(pick.candidates >= 1);
        CHECK(pick.ms > 0);
        CHECK(pick.ms <= pick.heuristic_ms);  // the heuristic's choice was among those timed
        CHECK(pick.pick.find("FMA math") != std::string::npos);  // fp32: FMA candidates only
      }
      again = run();  // the plans remember their picks: nothing is timed again
      CHECK(cudnn::benchmark_picks().size() == before + 3);
      const std::vector<ops::ConvTuneRow> rows = ops::conv_tune_picks();
      CHECK(std::count_if(rows.begin(), rows.end(), [](const ops::ConvTuneRow& r) {
              return r.pick.rfind("cuDNN ", 0) == 0;
            }) >= 3);
    }
    {
      // Deterministic calls ignore the policy: a pick by timing need not repeat.
      const DeterministicCudnn scope;
      const test::SettingScope tune(ops::conv_autotune, ops::set_conv_autotune, true);
      run();
      CHECK(cudnn::benchmark_picks().size() == before + 3);
    }
    // The same forward algorithm twice gives the same bits (the backward ones the policy may pick
    // include cuDNN's atomic ones); and the picks compute the convolution.
    CHECK(max_abs_diff(tuned.first, again.first) == 0.0);
    const auto ours = run();
    CHECK(max_abs_diff(tuned.first, ours.first) <= sum_tolerance(24 * 9 + 1, 1.0));
    CHECK(max_abs_diff(tuned.second.input, ours.second.input) <= sum_tolerance(40 * 9, 1.0));
    CHECK(max_abs_diff(tuned.second.weight, ours.second.weight) <=
          sum_tolerance(8 * 20 * 18, 1.0));  // N*OH*OW
  }
#endif
}

}  // namespace echelon
