// Bad input throws echelon::Error whose message names the op, the offending shapes/values and
// the source location — never a crash.
#include <doctest/doctest.h>

#include <string>

#include <echelon/base/file.h>
#include <echelon/tensor/ops.h>

#include "tests/support/temp_dir.h"

using namespace echelon;

namespace {
Tensor ones(const Shape& shape, DType dtype = kFloat32) {
  return Tensor::ones(shape, dtype);
}

// The message `fn` throws, or "" when it does not throw.
template <typename Fn>
std::string message_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_SUITE("errors") {
  TEST_CASE("shape mismatch names the op and both shapes") {
    const std::string m = message_of([] { ops::add(ones({3, 4}), ones({2, 4})); });
    CHECK(m.find("add") != std::string::npos);
    CHECK(m.find("[3, 4]") != std::string::npos);
    CHECK(m.find("[2, 4]") != std::string::npos);
    CHECK(m.find(".cpp:") != std::string::npos);  // file:line for the developer
    CHECK_THROWS_WITH_AS(ops::matmul(ones({3, 4}), ones({5, 2})),
                         doctest::Contains("matmul: inner sizes differ: [3, 4] x [5, 2]"), Error);
    CHECK_THROWS_WITH_AS(ops::bmm(ones({2, 3, 4}), ones({3, 4, 2})),
                         doctest::Contains("bmm: batch sizes differ"), Error);
    CHECK_THROWS_WITH_AS(ops::matmul(ones({3}), ones({3, 2})), doctest::Contains("expected 2-D"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::unary_backward(UnaryOp::Exp, ones({3}), ones({4}), ones({3})),
                         doctest::Contains("exp_backward: shape mismatch: [3] vs [4]"), Error);
    CHECK_THROWS_WITH_AS(ops::concat({ones({2, 3}), ones({3, 3})}, 1),
                         doctest::Contains("concat: tensor 1 has shape [3, 3]"), Error);
    Tensor dst = ones({2, 3});
    CHECK_THROWS_WITH_AS(ops::copy_(dst, ones({4})), doctest::Contains("copy_"), Error);
    CHECK_THROWS_WITH_AS(ops::axpy_(dst, ones({3, 2}), 1.0),
                         doctest::Contains("axpy_: shape mismatch"), Error);
    Tensor c = ones({3, 3});
    CHECK_THROWS_WITH_AS(ops::gemm_(c, ones({3, 4}), ones({4, 2}), false, false, 1, 0),
                         doctest::Contains("gemm_: output shape [3, 3] should be [3, 2]"), Error);
    CHECK_THROWS_WITH_AS(ops::sum_to(ones({3, 4}), {2, 4}), doctest::Contains("sum_to"), Error);
  }

  TEST_CASE("bad dims") {
    CHECK_THROWS_WITH_AS(ops::sum(ones({2, 3}), {2}),
                         doctest::Contains("sum: dim 2 is out of range"), Error);
    CHECK_THROWS_WITH_AS(ops::sum(ones({2, 3}), {1, -1}), doctest::Contains("appears twice"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::softmax(ones({2, 3}), -3), doctest::Contains("softmax: dim -3"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::argmax(ones({2, 3}), 5), doctest::Contains("argmax: dim 5"), Error);
    CHECK_THROWS_WITH_AS(ones({2, 3}).transpose(0, 2), doctest::Contains("transpose: dim 2"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::amax(ones({2, 0}), {1}), doctest::Contains("empty dim"), Error);
  }

  TEST_CASE("bad indices name the index") {
    const Tensor x = ones({4, 5});
    CHECK_THROWS_WITH_AS(ops::index_select(x, 1, Tensor::from_vector<int64_t>({1, 7, 2}, {3})),
                         doctest::Contains("index_select: index 7 is out of range [0, 5)"), Error);
    CHECK_THROWS_WITH_AS(ops::gather(x, 1, Tensor::from_vector<int64_t>({0, -1, 2, 3}, {4, 1})),
                         doctest::Contains("gather: index -1 is out of range"), Error);
    CHECK_THROWS_WITH_AS(ops::one_hot(Tensor::from_vector<int64_t>({0, 10}, {2}), 10),
                         doctest::Contains("one_hot: label 10 is out of range [0, 10)"), Error);
    CHECK_THROWS_WITH_AS(ops::gather(x, 1, Tensor::zeros({4, 1}, kInt64).view({4})),
                         doctest::Contains("must have the rank"), Error);
    CHECK_THROWS_WITH_AS(x.select(0, 4), doctest::Contains("index 4 is out of range"), Error);
  }

  TEST_CASE("dtype mismatches and unsupported dtypes") {
    CHECK_THROWS_WITH_AS(
        ops::mul(ones({2}), ones({2}, kFloat64)),
        doctest::Contains("mul: dtype mismatch: float32[2] on cpu vs float64[2] on cpu"), Error);
    CHECK_THROWS_WITH_AS(ops::exp(ones({2}, kInt64)),
                         doctest::Contains("exp: expected a float32/float64"), Error);
    CHECK_THROWS_WITH_AS(ops::index_select(ones({3}), 0, ones({1}, kInt32)),
                         doctest::Contains("index must be int64"), Error);
    CHECK_THROWS_WITH_AS(ones({2}).data<double>(), doctest::Contains("data<float64>"), Error);
    Generator gen(1);
    CHECK_THROWS_WITH_AS(ops::rand({2}, gen, kInt32), doctest::Contains("rand: dtype"), Error);
  }

  TEST_CASE("bad arguments") {
    Generator gen(1);
    CHECK_THROWS_WITH_AS(ops::bernoulli({3}, 1.5, gen), doctest::Contains("[0, 1], got 1.5"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::arange(-1), doctest::Contains("arange"), Error);
    CHECK_THROWS_WITH_AS(ops::clamp(ones({2}), 1.0, 0.0), doctest::Contains("clamp: lo 1"), Error);
    CHECK_THROWS_WITH_AS(Tensor::empty({2, -3}), doctest::Contains("negative size"), Error);
    Conv2dGeometry g;
    g.kernel_h = g.kernel_w = 5;
    CHECK_THROWS_WITH_AS(ops::im2col(ones({1, 1, 3, 3}), g),
                         doctest::Contains("does not fit input [1, 1, 3, 3]"), Error);
    g.kernel_h = 1;
    g.kernel_w = 1;
    g.stride_h = 0;
    CHECK_THROWS_WITH_AS(ops::im2col(ones({1, 1, 3, 3}), g), doctest::Contains("invalid geometry"),
                         Error);
    CHECK_THROWS_WITH_AS(ops::im2col(ones({3, 3}), Conv2dGeometry{}),
                         doctest::Contains("(N, C, H, W)"), Error);
    CHECK_THROWS_WITH_AS(ops::col2im(ones({1, 4, 4}), Conv2dGeometry{}, {1, 1, 3, 3}),
                         doctest::Contains("col2im: columns shape [1, 4, 4]"), Error);
    CHECK_THROWS_WITH_AS(ops::concat({}, 0), doctest::Contains("no tensors"), Error);
    CHECK_THROWS_WITH_AS(ops::relu(Tensor()), doctest::Contains("undefined"), Error);
  }

  TEST_CASE("writing a file over a directory names the directory") {
    // Once "DIR: cannot rename the temporary file onto: Is a directory".
    const std::string dir = test::temp_dir("write_over_dir").string();
    const std::string message = message_of([&] { write_file_atomic(dir, "x"); });
    CHECK_MESSAGE(message.find(dir + ": is a directory, not a file name") != std::string::npos,
                  message);
  }
}
