// The fast max pooling (tensor/cpu/fast/pool.cpp: the AVX-512 2x2 loops, pool_avx512.h, and the
// portable / AVX2 ones) against the naive twin bit for bit: forward values and argmax, backward
// through one-pass 2x2 cells and the scatter fallback, NaNs, ties and -0 gradients; row lengths
// around the 16-output vectors, odd plane sizes, non-contiguous inputs, 1 and 2 threads, float
// and double. Also the leading-dim sum (Linear's bias gradient), the trailing-dim sum and mean
// (global average pooling) and ReLU's backward from its output.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/node.h>
#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/layers/pooling.h>
#include <echelon/layers/relu.h>
#include <echelon/layers/sequential.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/ops.h>

#include "tests/support/setting_scope.h"

namespace echelon {
namespace {

// Thread count, kernels and the pooling AVX-512 switch for a scope; restored after.
struct PoolScope {
  PoolScope(int threads, ops::CpuKernels kernels, bool avx512)
      : threads_(cpu::fast::num_threads, cpu::fast::set_num_threads, threads),
        kernels_(ops::cpu_kernels, ops::set_cpu_kernels, kernels),
        avx512_(cpu::fast::max_pool_avx512, cpu::fast::set_max_pool_avx512, avx512) {}
  test::SettingScope<int> threads_;
  test::SettingScope<ops::CpuKernels> kernels_;
  test::SettingScope<bool> avx512_;
};

// The fast settings to compare with the twin: 1 and 2 threads, AVX-512 on where the CPU has it.
struct FastSetting {
  int threads;
  bool avx512;
};
std::vector<FastSetting> fast_settings() {
  std::vector<FastSetting> s = {{1, false}, {2, false}};
  if (cpu::fast::max_pool_avx512_available()) s.insert(s.end(), {{1, true}, {2, true}});
  return s;
}

// a and b hold the same bits (any NaN matching any NaN; +0 and -0 differ).
void check_same_bits(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  const std::vector<double> x = a.to(kFloat64).to_vector<double>(),
                            y = b.to(kFloat64).to_vector<double>();
  int64_t mismatches = 0, first = -1;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool same = (std::isnan(x[i]) && std::isnan(y[i])) ||
                      (x[i] == y[i] && std::signbit(x[i]) == std::signbit(y[i]));
    if (same) continue;
    if (mismatches++ == 0) first = static_cast<int64_t>(i);
  }
  CAPTURE(first);
  CHECK(mismatches == 0);
}

// run_all's outputs with the fast path at 1 and 2 threads, bit for bit those of the naive twins.
void check_fast_as_naive(const std::function<std::vector<Tensor>()>& run_all) {
  std::vector<Tensor> naive;
  {
    PoolScope scope(1, ops::CpuKernels::Naive, false);
    naive = run_all();
  }
  for (const int threads : {1, 2}) {
    PoolScope scope(threads, ops::CpuKernels::Fast, false);
    const std::vector<Tensor> fast = run_all();
    REQUIRE(fast.size() == naive.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      CAPTURE(threads);
      CAPTURE(i);
      check_same_bits(fast[i], naive[i]);
    }
  }
}

// Forward and backward outputs of one pooling: y, argmax, and the input gradient.
struct PoolResult {
  Tensor y, argmax, grad_in;
};

PoolResult pool(const Tensor& x, const Pool2dGeometry& window, const Tensor& grad) {
  PoolResult r;
  r.y = ops::max_pool2d(x, window, &r.argmax);
  r.grad_in = ops::max_pool2d_backward(grad, r.argmax, x.shape());
  return r;
}

// A (n, c, h, w) input with NaNs, ties and -0s sprinkled in (dtype T's rounding of randn).
Tensor tricky_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  Tensor x = ops::randn(shape, gen, kFloat64);
  auto* v = x.data<double>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; i += 13) v[i] = std::numeric_limits<double>::quiet_NaN();
  for (int64_t i = 5; i + 1 < n; i += 11) v[i + 1] = v[i];  // ties: the first maximum wins
  for (int64_t i = 3; i < n; i += 17) v[i] = -0.0;
  return x.to(dtype);
}

// The twin's gradient and the fast path's, the latter under every fast setting, for input x.
void compare_with_twin(const Tensor& x, const Pool2dGeometry& window) {
  Generator gen(99);
  const Pool2dGeometry a = window.for_input(x.size(0), x.size(1), x.size(2), x.size(3));
  Tensor grad = ops::randn({a.n, a.c, a.out_h, a.out_w}, gen, kFloat64);
  auto* g = grad.data<double>();
  for (int64_t i = 0; i < grad.numel(); i += 7) g[i] = -0.0;  // the twin's fill and add: +0
  for (int64_t i = 4; i < grad.numel(); i += 19) g[i] = std::numeric_limits<double>::quiet_NaN();
  grad = grad.to(x.dtype());
  PoolResult naive;
  {
    PoolScope scope(1, ops::CpuKernels::Naive, false);
    naive = pool(x, window, grad);
  }
  for (const FastSetting& s : fast_settings()) {
    CAPTURE(s.threads);
    CAPTURE(s.avx512);
    PoolScope scope(s.threads, ops::CpuKernels::Fast, s.avx512);
    const PoolResult fast = pool(x, window, grad);
    check_same_bits(fast.y, naive.y);
    check_same_bits(fast.argmax.to(kFloat64), naive.argmax.to(kFloat64));
    check_same_bits(fast.grad_in, naive.grad_in);
  }
}

// The backward with the window (with relu: of the fused forward, masked by its y) on the twin,
// bit for bit what it replaces (ReLU's backward, then the scatter without the window), and on
// every fast setting, bit for bit the twin.
void compare_windowed_with_twin(const Tensor& x, const Pool2dGeometry& window) {
  Generator gen(98);
  const Pool2dGeometry a = window.for_input(x.size(0), x.size(1), x.size(2), x.size(3));
  Tensor grad = ops::randn({a.n, a.c, a.out_h, a.out_w}, gen, kFloat64);
  auto* g = grad.data<double>();
  for (int64_t i = 0; i < grad.numel(); i += 7) g[i] = -0.0;
  for (int64_t i = 4; i < grad.numel(); i += 19) g[i] = std::numeric_limits<double>::quiet_NaN();
  grad = grad.to(x.dtype());
  const auto windowed = [&](bool relu) {
    Tensor argmax;
    const Tensor y = ops::max_pool2d(x, window, &argmax, relu);
    return ops::max_pool2d_backward(grad, argmax, x.shape(), window, relu ? y : Tensor());
  };
  for (const bool relu : {false, true}) {
    CAPTURE(relu);
    Tensor naive;
    {
      PoolScope scope(1, ops::CpuKernels::Naive, false);
      naive = windowed(relu);
      Tensor argmax;
      const Tensor y = ops::max_pool2d(x, window, &argmax, relu);
      const Tensor masked = relu ? ops::unary_backward(UnaryOp::Relu, grad, y, y) : grad;
      check_same_bits(naive, ops::max_pool2d_backward(masked, argmax, x.shape()));
    }
    for (const FastSetting& s : fast_settings()) {
      CAPTURE(s.threads);
      CAPTURE(s.avx512);
      PoolScope scope(s.threads, ops::CpuKernels::Fast, s.avx512);
      check_same_bits(windowed(relu), naive);
    }
  }
}

// relu then max pooling through autograd: the output and the input's gradient. Fused: the one
// relu_max_pool2d node; else the two ops.
std::pair<Tensor, Tensor> relu_pool_with_grad(const Tensor& x, const Pool2dGeometry& window,
                                              const Tensor& grad, bool fused) {
  Tensor leaf = x.clone();
  leaf.set_requires_grad(true);
  Tensor y = fused ? relu_max_pool2d(leaf, window) : max_pool2d(relu(leaf), window);
  backward(y, grad);
  return {y.detach(), leaf.grad()};
}

}  // namespace

TEST_SUITE("fast_pool") {
  TEST_CASE("2x2 max pooling: fast path bit-identical to the twin, forward and backward") {
    // Row lengths around the 16-output vectors (1, 15, 16, 17, 33 outputs), odd plane sizes (a
    // row and a column no window covers), LeNet-5's two poolings.
    const std::vector<Shape> shapes = {{2, 3, 5, 2},  {3, 2, 7, 31}, {2, 2, 4, 32},
                                       {2, 3, 6, 35}, {1, 2, 3, 67}, {4, 6, 24, 24},
                                       {3, 16, 8, 8}, {1, 1, 2, 2},  {2, 1, 9, 11}};
    for (const DType dtype : {kFloat32, kFloat64})
      for (const Shape& shape : shapes) {
        CAPTURE(shape);
        CAPTURE(dtype);
        compare_with_twin(tricky_input(shape, dtype, 3), Pool2dGeometry{});
      }
  }

  TEST_CASE("2x2 max pooling of non-contiguous inputs: as the twin on the same view") {
    const Tensor base = tricky_input({3, 5, 19, 12}, kFloat32, 4);
    compare_with_twin(base.transpose(2, 3), Pool2dGeometry{});  // (3, 5, 12, 19)
    compare_with_twin(base.transpose(0, 1), Pool2dGeometry{});  // (5, 3, 19, 12)
  }

  TEST_CASE("other windows: 3x3 stride 2 (indices in and out of the 2x2 cells), 3x3 stride 1") {
    Pool2dGeometry overlapping;  // windows share rows and columns: the backward's scatter
    overlapping.kernel_h = overlapping.kernel_w = 3;
    Pool2dGeometry padded = overlapping;
    padded.pad_h = padded.pad_w = 1;
    padded.ceil_mode = true;
    Pool2dGeometry dense = overlapping;
    dense.stride_h = dense.stride_w = 1;
    for (const Pool2dGeometry& window : {overlapping, padded, dense})
      for (const DType dtype : {kFloat32, kFloat64}) {
        compare_with_twin(tricky_input({2, 3, 9, 21}, dtype, 5), window);
        compare_with_twin(tricky_input({1, 2, 11, 40}, dtype, 6), window);
      }
    // A 3x3, stride-2 pooling of an input falling to the bottom right: every argmax at a window's
    // top-left 2x2 cell, so the backward takes the one-pass cells, which must equal the scatter.
    const Tensor ramp =
        ops::mul(ops::arange(int64_t{2} * 3 * 9 * 21, kFloat32).reshape({2, 3, 9, 21}), -1.0);
    compare_with_twin(ramp, overlapping);
  }

  TEST_CASE("the backward scatters a plane whose index leaves its cell, and refuses a bad one") {
    // (1, 2, 4, 16) -> (1, 2, 2, 8): 8 windows a row, so AVX-512 takes the one-pass cells. Plane
    // 0: every index in its cell, at each of the 4 positions; plane 1: output (0, 0) points at
    // input 34 (row 2, column 2: output (1, 1)'s cell), legal for the scatter.
    const int64_t w = 16, out_w = 8, out_plane = 16, in_plane = 64;
    std::vector<int64_t> indices;
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t q = 0; q < out_plane; ++q) {
        const int64_t offsets[4] = {0, 1, w, w + 1};
        indices.push_back(2 * (q / out_w) * w + 2 * (q % out_w) + offsets[q % 4]);
      }
    indices[out_plane] = 34;
    std::vector<float> grad_values(indices.size()), expected(2 * in_plane, 0.0f);
    for (size_t i = 0; i < indices.size(); ++i) {
      grad_values[i] = static_cast<float>(i + 1);
      expected[i / out_plane * in_plane + static_cast<size_t>(indices[i])] += grad_values[i];
    }
    const Tensor grad = Tensor::from_vector<float>(grad_values, {1, 2, 2, out_w});
    for (const FastSetting& s : fast_settings()) {
      CAPTURE(s.avx512);
      CAPTURE(s.threads);
      PoolScope scope(s.threads, ops::CpuKernels::Fast, s.avx512);
      const Tensor argmax = Tensor::from_vector<int64_t>(indices, {1, 2, 2, out_w});
      CHECK(ops::max_pool2d_backward(grad, argmax, {1, 2, 4, w}).to_vector<float>() == expected);
      for (const int64_t bad : {in_plane, int64_t{-1}, int64_t{1} << 40}) {
        CAPTURE(bad);
        std::vector<int64_t> wrong = indices;
        wrong[out_plane + 9] = bad;
        CHECK_THROWS_WITH_AS(
            ops::max_pool2d_backward(grad, Tensor::from_vector<int64_t>(wrong, {1, 2, 2, out_w}),
                                     {1, 2, 4, w}),
            doctest::Contains(("argmax index " + std::to_string(bad)).c_str()), Error);
      }
    }
  }

  TEST_CASE("max_pool2d_backward with the window and relu_out: the twin's bits on every path") {
    Pool2dGeometry overlapping;  // 3x3 stride 2: each cell in its window, the fast path's cells
    overlapping.kernel_h = overlapping.kernel_w = 3;
    Pool2dGeometry padded = overlapping;  // no cells: the checked scatter
    padded.pad_h = padded.pad_w = 1;
    padded.ceil_mode = true;
    Pool2dGeometry dense = overlapping;
    dense.stride_h = dense.stride_w = 1;
    for (const Pool2dGeometry& window : {Pool2dGeometry{}, overlapping, padded, dense})
      for (const DType dtype : {kFloat32, kFloat64}) {
        CAPTURE(window.kernel_h);
        CAPTURE(window.stride_h);
        CAPTURE(window.pad_h);
        CAPTURE(dtype);
        // 40 columns: rows of 8 windows or more, the one-pass cells with AVX-512.
        compare_windowed_with_twin(tricky_input({2, 3, 9, 21}, dtype, 5), window);
        compare_windowed_with_twin(tricky_input({1, 2, 11, 40}, dtype, 6), window);
      }
    const Tensor ramp =  // every argmax at its window's top left: the cells succeed
        ops::mul(ops::arange(int64_t{2} * 3 * 9 * 40, kFloat32).reshape({2, 3, 9, 40}), -1.0);
    compare_windowed_with_twin(ramp, overlapping);
  }

  TEST_CASE("max_pool2d_backward with the window refuses an argmax outside its window") {
    // (1, 1, 4, 16) -> (1, 1, 2, 8), 2x2 stride 2, every index at its window's top left but
    // output (0, 1)'s, which names input 0: in the plane (the scatter takes it), in output
    // (0, 0)'s window. Refused with and without relu_out, by the twin and every fast setting.
    std::vector<int64_t> indices;
    for (int64_t q = 0; q < 16; ++q) indices.push_back(2 * (q / 8) * 16 + 2 * (q % 8));
    indices[1] = 0;
    const Tensor argmax = Tensor::from_vector<int64_t>(indices, {1, 1, 2, 8});
    Generator gen(7);
    const Tensor grad = ops::randn({1, 1, 2, 8}, gen), y = ops::rand({1, 1, 2, 8}, gen);
    std::vector<FastSetting> settings = fast_settings();
    settings.push_back({0, false});  // 0 threads: the naive twin
    for (const FastSetting& s : settings) {
      CAPTURE(s.threads);
      CAPTURE(s.avx512);
      PoolScope scope(std::max(s.threads, 1),
                      s.threads == 0 ? ops::CpuKernels::Naive : ops::CpuKernels::Fast, s.avx512);
      CHECK_NOTHROW(ops::max_pool2d_backward(grad, argmax, {1, 1, 4, 16}));
      for (const Tensor& relu_out : {Tensor(), y})
        CHECK_THROWS_WITH_AS(
            ops::max_pool2d_backward(grad, argmax, {1, 1, 4, 16}, Pool2dGeometry{}, relu_out),
            doctest::Contains("max_pool2d_backward: argmax index 0 of output (0, 0, 0, 1) is "
                              "outside its 2x2 window at row 0, column 2 of the 4x16 input plane"),
            Error);
    }
    Pool2dGeometry wider;  // a window that does not give grad_out's shape
    wider.kernel_w = wider.stride_w = 4;
    CHECK_THROWS_WITH_AS(ops::max_pool2d_backward(grad, argmax, {1, 1, 4, 16}, wider),
                         doctest::Contains("grad_out has shape"), Error);
  }

  TEST_CASE("sum and mean over leading dims: fast path bit-identical to the twin") {
    Generator gen(8);
    // (64, 120): Linear's bias gradient; 40000 columns: split across threads; float and double.
    const std::vector<Tensor> inputs = {ops::randn({64, 120}, gen), ops::randn({3, 40000}, gen),
                                        ops::randn({5, 4, 9}, gen, kFloat64),
                                        ops::randn({1, 3}, gen), ops::randn({3000, 2}, gen)};
    for (const Tensor& x : inputs) {
      CAPTURE(x.shape());
      auto run_all = [&] {
        std::vector<Tensor> outs = {ops::sum(x, {0}), ops::mean(x, {0}, true),
                                    ops::sum(x.transpose(0, 1), {0})};  // a view: the twin
        if (x.dim() == 3) {
          outs.push_back(ops::sum(x, {0, 1}));
          outs.push_back(ops::mean(x, {1, 0}));
        }
        return outs;
      };
      check_fast_as_naive(run_all);
    }
  }

  TEST_CASE("sum and mean over trailing dims (global average pooling): bit-identical to the twin") {
    Generator gen(9);
    // ResNet's pooled maps (rows in blocks of 4 and a tail), rows longer than a chunk, float64,
    // one row, and the transposed view (the twin: its reduced dim is not the inner one).
    const std::vector<Tensor> inputs = {ops::randn({10, 7, 8, 8}, gen), ops::randn({3, 40000}, gen),
                                        ops::randn({5, 4, 9}, gen, kFloat64),
                                        ops::randn({1, 3}, gen), ops::randn({3001, 2}, gen)};
    for (const Tensor& x : inputs) {
      CAPTURE(x.shape());
      auto run_all = [&] {
        std::vector<Tensor> outs = {ops::sum(x, {-1}), ops::mean(x, {-1}, true), ops::sum(x),
                                    ops::mean(x), ops::sum(x.transpose(0, 1), {-1})};
        if (x.dim() >= 3) {
          outs.push_back(ops::mean(x, {-2, -1}, true));
          outs.push_back(ops::sum(x, {-1, -2}));
        }
        return outs;
      };
      check_fast_as_naive(run_all);
    }
  }

  TEST_CASE("relu's backward from its output: the input's gradient, and the input not kept") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    Tensor x = Tensor::from_vector<float>({-2.0f, -0.0f, 0.0f, 1e-30f, 3.0f, nan}, {6});
    x.set_requires_grad(true);
    Tensor pre = x * 1.0;  // not a leaf: only the graph holds it once `pre` goes
    const std::weak_ptr<Storage> pre_storage = pre.storage();
    Tensor y = relu(pre);
    pre = Tensor();
    CHECK(pre_storage.expired());
    backward(y, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {6}));
    const std::vector<float> grad = x.grad().to_vector<float>();
    CHECK(grad == std::vector<float>({0, 0, 0, 4, 5, 0}));
  }

  TEST_CASE("ReLU folded into max pooling: output, argmax and gradient as the composition") {
    Pool2dGeometry overlapping;
    overlapping.kernel_h = overlapping.kernel_w = 3;
    Pool2dGeometry padded = overlapping;
    padded.pad_h = padded.pad_w = 1;
    padded.ceil_mode = true;
    const std::vector<Shape> shapes = {
        {2, 3, 7, 31}, {2, 3, 6, 35}, {4, 6, 24, 24}, {3, 16, 8, 8}, {2, 1, 9, 11}};
    for (const DType dtype : {kFloat32, kFloat64})
      for (const Shape& shape : shapes)
        for (const Pool2dGeometry& window : {Pool2dGeometry{}, overlapping, padded}) {
          CAPTURE(shape);
          CAPTURE(dtype);
          CAPTURE(window.kernel_h);
          const Tensor x = tricky_input(shape, dtype, 11);
          const Pool2dGeometry a = window.for_input(shape[0], shape[1], shape[2], shape[3]);
          Generator gen(12);
          Tensor grad = ops::randn({a.n, a.c, a.out_h, a.out_w}, gen, kFloat64);
          for (int64_t i = 0; i < grad.numel(); i += 5) grad.data<double>()[i] = -0.0;
          grad = grad.to(dtype);
          std::pair<Tensor, Tensor> naive;
          Tensor naive_argmax;
          {
            PoolScope scope(1, ops::CpuKernels::Naive, false);
            naive = relu_pool_with_grad(x, window, grad, /*fused=*/false);
            ops::max_pool2d(ops::relu(x), window, &naive_argmax);
          }
          for (const FastSetting& s : fast_settings()) {
            CAPTURE(s.threads);
            CAPTURE(s.avx512);
            PoolScope scope(s.threads, ops::CpuKernels::Fast, s.avx512);
            const auto fast = relu_pool_with_grad(x, window, grad, /*fused=*/true);
            check_same_bits(fast.first, naive.first);
            check_same_bits(fast.second, naive.second);
            Tensor argmax;
            ops::max_pool2d(x, window, &argmax, /*relu_first=*/true);
            check_same_bits(argmax.to(kFloat64), naive_argmax.to(kFloat64));
          }
        }
  }

  TEST_CASE(
      "Sequential runs ReLU + MaxPool2d as one node; LeNet-5 as layer by layer, bit for bit") {
    PoolScope scope(2, ops::CpuKernels::Fast, cpu::fast::max_pool_avx512_available());
    Sequential pair({std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2)});
    Generator gen(13);
    Tensor x = ops::randn({2, 3, 6, 6}, gen);
    x.set_requires_grad(true);
    const Tensor y = pair.forward(x);
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == "relu_max_pool2d");
    // A non-image input is not fused: the pooling's own error names its layer.
    CHECK_THROWS_WITH_AS(pair.forward(ops::randn({2, 3}, gen)),
                         doctest::Contains("Sequential layer 1 (MaxPool2d)"), Error);

    // ResNet-20's stem: a BatchNorm then a ReLU, fused too (batch_norm_relu).
    struct ModelCase {
      const char* name;
      int64_t channels, size;
    };
    for (const ModelCase& m : {ModelCase{"lenet5", 1, 28}, ModelCase{"resnet20", 3, 16}}) {
      const char* name = m.name;
      const int64_t channels = m.channels, size = m.size;
      CAPTURE(name);
      const auto model = make_model(name, channels, 10, 3, size);
      const Tensor images = ops::randn({5, channels, size, size}, gen);
      const Tensor seed = ops::randn({5, 10}, gen);
      std::vector<std::vector<Tensor>> grads(2);
      std::vector<Tensor> outputs(2);
      for (int layer_by_layer = 0; layer_by_layer < 2; ++layer_by_layer) {
        model->zero_grad();
        Tensor h = images;
        if (layer_by_layer)
          for (size_t i = 0; i < model->size(); ++i) h = model->at(i)->forward(h);
        else
          h = model->forward(images);
        backward(h, seed);
        outputs[size_t(layer_by_layer)] = h.detach();
        for (const Tensor& p : model->parameters())
          grads[size_t(layer_by_layer)].push_back(p.grad().clone());
      }
      check_same_bits(outputs[0], outputs[1]);
      REQUIRE(grads[0].size() == grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) check_same_bits(grads[0][i], grads[1][i]);
    }
  }
}

}  // namespace echelon
