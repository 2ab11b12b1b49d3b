// Tutorial 1: tensors and ops.
//
// A Tensor (tensor/tensor.h) is a handle: shape, strides, an offset and a shared Storage on one
// device. Views (view, transpose, slice, ...) share the storage; contiguous() and clone() copy.
// The raw ops live in namespace echelon::ops (tensor/ops.h): they dispatch on the device (a naive
// CPU twin in tensor/cpu/, a CUDA launcher in cuda/kernels/) and never record gradients. The
// functions of the same name in namespace echelon (autograd/functions.h) call them and record a
// graph node when an input requires grad; tutorial 2 uses those.
//
// Build and run: cmake --build build --target 01_tensors_and_ops &&
// build/examples/01_tensors_and_ops
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/echelon.h>

using namespace echelon;

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

bool near_value(double a, double b) {
  return std::fabs(a - b) <= 1e-5 * (1.0 + std::fabs(b));
}

}  // namespace

int main() {
  // 1. Creating tensors. from_vector copies host values into a new contiguous (2, 3) tensor.
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});  // (2, 3)
  std::printf("a = %s\n", a.to_string().c_str());
  expect(a.dim() == 2 && a.size(0) == 2 && a.size(1) == 3 && a.numel() == 6, "a is (2, 3)");
  expect(a.dtype() == kFloat32 && !a.is_cuda(), "float32 on the CPU by default");

  // 2. Views share storage. transpose swaps two strides; no element moves.
  Tensor at = a.transpose(0, 1);  // (3, 2), strides (1, 3)
  expect(at.shape() == Shape({3, 2}) && !at.is_contiguous(), "transpose is a strided view");
  expect(at.storage() == a.storage(), "the view shares a's storage");
  Tensor row = a.select(0, 1);  // (3): the second row, offset 3
  expect(row.to_vector<float>() == std::vector<float>({4, 5, 6}), "select(0, 1) is row 1");

  // 3. Elementwise ops with NumPy broadcasting: (2, 3) + (3) -> (2, 3).
  Tensor bias = Tensor::from_vector<float>({10, 20, 30}, {3});
  Tensor b = ops::add(a, bias);
  expect(b.to_vector<float>() == std::vector<float>({11, 22, 33, 14, 25, 36}), "broadcast add");
  Tensor r = ops::relu(ops::add(a, -3.5));  // max(a - 3.5, 0)
  expect(r.to_vector<float>() == std::vector<float>({0, 0, 0, 0.5f, 1.5f, 2.5f}), "relu");

  // 4. Matrix product: (2, 3) x (3, 2) -> (2, 2). The op reads the strided view as it is.
  Tensor m = ops::matmul(a, at);  // a a^T
  const std::vector<float> mv = m.to_vector<float>();
  expect(m.shape() == Shape({2, 2}) && near_value(mv[0], 14) && near_value(mv[1], 32) &&
             near_value(mv[3], 77),
         "matmul(a, a^T) = [[14, 32], [32, 77]]");

  // 5. Reductions over chosen dims, with or without keepdim.
  Tensor col_sum = ops::sum(a, {0});          // (3)
  Tensor row_mean = ops::mean(a, {1}, true);  // (2, 1)
  expect(col_sum.to_vector<float>() == std::vector<float>({5, 7, 9}), "sum over dim 0");
  expect(row_mean.shape() == Shape({2, 1}) && near_value(row_mean.to_vector<float>()[1], 5),
         "mean over dim 1, keepdim");
  expect(ops::argmax(a, 1).to_vector<int64_t>() == std::vector<int64_t>({2, 2}), "argmax");

  // 6. Shape ops: view needs a contiguous tensor; reshape copies when it must.
  Tensor flat = a.view({6});
  Tensor again = at.reshape({6});  // at is not contiguous, so this copies (column order)
  expect(flat.storage() == a.storage(), "view shares storage");
  expect(again.to_vector<float>() == std::vector<float>({1, 4, 2, 5, 3, 6}), "reshape copies");

  // 7. Random numbers: Philox keyed by (seed, offset), the same numbers on the CPU and CUDA.
  Generator gen(42);
  Tensor x = ops::randn({1000}, gen);
  const double mean = ops::mean(x).item<float>();
  expect(std::fabs(mean) < 0.2, "randn has mean near 0");
  Generator same(42);
  expect(ops::randn({1000}, same).to_vector<float>() == x.to_vector<float>(),
         "same seed, same numbers");

  // 8. A convolution, the op the tour follows: x (N, C, H, W), weight (O, C, KH, KW).
  Conv2dGeometry window;
  window.kernel_h = window.kernel_w = 3;
  window.pad_h = window.pad_w = 1;
  Tensor img = Tensor::ones({1, 1, 4, 4});
  Tensor w = Tensor::ones({2, 1, 3, 3});
  Tensor y = ops::conv2d(img, w, Tensor(), window);  // (1, 2, 4, 4)
  const std::vector<float> yv = y.to_vector<float>();
  expect(y.shape() == Shape({1, 2, 4, 4}) && near_value(yv[0], 4) && near_value(yv[5], 9),
         "3x3 conv of ones: 4 at a corner, 9 inside");

  // 9. Errors are exceptions that name the op and the shapes.
  try {
    ops::matmul(a, a);  // (2, 3) x (2, 3): inner sizes differ
    expect(false, "matmul of mismatched shapes throws");
  } catch (const Error& e) {
    std::printf("     (the error reads: %s)\n", e.what());
    expect(true, "matmul of mismatched shapes throws");
  }

  std::printf("%s\n", failures == 0 ? "all checks passed" : "some checks FAILED");
  return failures == 0 ? 0 : 1;
}
