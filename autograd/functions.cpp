// Differentiable arithmetic, elementwise, reduction and shape functions. Each gradient lambda sits
// beside its forward; lambdas capture Tensor handles (references), never copies.
#include <echelon/autograd/functions.h>

#include <algorithm>
#include <numeric>

#include <echelon/autograd/node.h>
#include <echelon/base/error.h>

namespace echelon {

using autograd::record;
using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

namespace {

// A second handle on an op's output for its own backward lambda. A separate TensorImpl: holding
// the output's own impl would make a cycle (output -> node -> lambda -> output).
Tensor saved_output(const Tensor& y) {
  return make_view(y, y.shape(), y.strides(), y.offset());
}

Tensor unary_fn(const char* name, UnaryOp op, const Tensor& x) {
  Tensor y = ops::unary(op, x);
  Tensor y_saved = saved_output(y);
  return record(name, y, {x}, [op, x, y_saved](const Tensor& g, const Needs&) -> Grads {
    return {ops::unary_backward(op, g, x, y_saved)};
  });
}

// The shape x had before reducing `dims` with keepdim: the reduced dims become 1.
Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape out = in;
  if (dims.empty()) {
    std::fill(out.begin(), out.end(), 1);
    return out;
  }
  for (int64_t d : dims) out[wrap_dim(d, static_cast<int64_t>(in.size()), "sum")] = 1;
  return out;
}

// Broadcasts a reduction's gradient back over the reduced dims.
Tensor expand_reduced(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& dims) {
  return g.reshape(keepdim_shape(in_shape, dims)).expand(in_shape).contiguous();
}

int64_t reduced_count(const Shape& in_shape, const std::vector<int64_t>& dims) {
  if (dims.empty()) return shape_numel(in_shape);
  int64_t count = 1;
  for (int64_t d : dims)
    count *= in_shape[wrap_dim(d, static_cast<int64_t>(in_shape.size()), "mean")];
  return count;
}

}  // namespace

// ---- arithmetic --------------------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  return record("add", ops::add(a, b), {a, b}, [sa, sb](const Tensor& g, const Needs& n) -> Grads {
    return {n[0] ? ops::sum_to(g, sa) : Tensor(), n[1] ? ops::sum_to(g, sb) : Tensor()};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  return record("sub", ops::sub(a, b), {a, b}, [sa, sb](const Tensor& g, const Needs& n) -> Grads {
    return {n[0] ? ops::sum_to(g, sa) : Tensor(), n[1] ? ops::sum_to(ops::neg(g), sb) : Tensor()};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  return record("mul", ops::mul(a, b), {a, b}, [a, b](const Tensor& g, const Needs& n) -> Grads {
    return {n[0] ? ops::sum_to(ops::mul(g, b), a.shape()) : Tensor(),
            n[1] ? ops::sum_to(ops::mul(g, a), b.shape()) : Tensor()};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = ops::div(a, b);
  Tensor y_saved = saved_output(y);
  return record("div", y, {a, b}, [a, b, y_saved](const Tensor& g, const Needs& n) -> Grads {
    Tensor g_over_b = ops::div(g, b);
    // d(a/b)/db = -(a/b)/b
    return {n[0] ? ops::sum_to(g_over_b, a.shape()) : Tensor(),
            n[1] ? ops::sum_to(ops::neg(ops::mul(g_over_b, y_saved)), b.shape()) : Tensor()};
  });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  Tensor y = ops::pow(a, b);
  Tensor y_saved = saved_output(y);
  return record("pow", y, {a, b}, [a, b, y_saved](const Tensor& g, const Needs& n) -> Grads {
    Grads grads(2);
    if (n[0]) {  // b * a^(b-1)
      Tensor da = ops::mul(b, ops::pow(a, ops::add(b, -1.0)));
      grads[0] = ops::sum_to(ops::mul(g, da), a.shape());
    }
    if (n[1]) grads[1] = ops::sum_to(ops::mul(g, ops::mul(y_saved, ops::log(a))), b.shape());
    return grads;
  });
}

Tensor add(const Tensor& a, double s) {
  return record("add_scalar", ops::add(a, s), {a},
                [](const Tensor& g, const Needs&) -> Grads { return {g}; });
}

Tensor sub(const Tensor& a, double s) {
  return add(a, -s);
}

Tensor rsub(double s, const Tensor& a) {
  return record("rsub_scalar", ops::binary_scalar(BinaryOp::Sub, a, s, /*scalar_first=*/true), {a},
                [](const Tensor& g, const Needs&) -> Grads { return {ops::neg(g)}; });
}

Tensor mul(const Tensor& a, double s) {
  return record("mul_scalar", ops::mul(a, s), {a},
                [s](const Tensor& g, const Needs&) -> Grads { return {ops::mul(g, s)}; });
}

Tensor div(const Tensor& a, double s) {
  ECH_CHECK(s != 0.0, "div: division of ", a.describe(), " by the scalar 0");
  return mul(a, 1.0 / s);
}

Tensor rdiv(double s, const Tensor& a) {
  Tensor y = ops::binary_scalar(BinaryOp::Div, a, s, /*scalar_first=*/true);
  Tensor y_saved = saved_output(y);
  return record("rdiv_scalar", y, {a}, [a, y_saved](const Tensor& g, const Needs&) -> Grads {
    // d(s/a)/da = -(s/a)/a
    return {ops::neg(ops::div(ops::mul(g, y_saved), a))};
  });
}

Tensor pow(const Tensor& a, double exponent) {
  return record("pow_scalar", ops::pow(a, exponent), {a},
                [a, exponent](const Tensor& g, const Needs&) -> Grads {
                  return {ops::mul(ops::mul(g, ops::pow(a, exponent - 1.0)), exponent)};
                });
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator+(const Tensor& a, double s) {
  return add(a, s);
}
Tensor operator+(double s, const Tensor& a) {
  return add(a, s);
}
Tensor operator-(const Tensor& a, double s) {
  return sub(a, s);
}
Tensor operator-(double s, const Tensor& a) {
  return rsub(s, a);
}
Tensor operator*(const Tensor& a, double s) {
  return mul(a, s);
}
Tensor operator*(double s, const Tensor& a) {
  return mul(a, s);
}
Tensor operator/(const Tensor& a, double s) {
  return div(a, s);
}
Tensor operator/(double s, const Tensor& a) {
  return rdiv(s, a);
}
Tensor operator-(const Tensor& a) {
  return neg(a);
}

// ---- elementwise ---------------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  return record("neg", ops::neg(x), {x},
                [](const Tensor& g, const Needs&) -> Grads { return {ops::neg(g)}; });
}
Tensor exp(const Tensor& x) {
  return unary_fn("exp", UnaryOp::Exp, x);
}
Tensor log(const Tensor& x) {
  return unary_fn("log", UnaryOp::Log, x);
}
Tensor sqrt(const Tensor& x) {
  return unary_fn("sqrt", UnaryOp::Sqrt, x);
}
Tensor relu(const Tensor& x) {
  Tensor y = ops::relu(x);
  Tensor y_saved = saved_output(y);
  // The derivative from the output alone: y > 0 exactly where x > 0 (x NaN, -0 or below zero
  // gives y = 0), so unary_backward reads y in x's place with the same result, and x is not kept
  // alive until the backward (LeNet-5's first ReLU frees conv1's 1.15 MiB output at once).
  return record("relu", y, {x}, [y_saved](const Tensor& g, const Needs&) -> Grads {
    return {ops::unary_backward(UnaryOp::Relu, g, y_saved, y_saved)};
  });
}
Tensor tanh(const Tensor& x) {
  return unary_fn("tanh", UnaryOp::Tanh, x);
}
Tensor sigmoid(const Tensor& x) {
  return unary_fn("sigmoid", UnaryOp::Sigmoid, x);
}
Tensor square(const Tensor& x) {
  return unary_fn("square", UnaryOp::Square, x);
}

// ---- matrix products -------------------------------------------------------------------------

Tensor matmul(const Tensor& a, const Tensor& b) {
  ECH_CHECK(a.dim() == b.dim() && (a.dim() == 2 || a.dim() == 3),
            "matmul: expected two 2-D (M, K)x(K, N) or two 3-D (B, M, K)x(B, K, N) tensors, got ",
            a.shape(), " and ", b.shape());
  const bool batched = a.dim() == 3;
  Tensor y = batched ? ops::bmm(a, b) : ops::matmul(a, b);
  return record("matmul", y, {a, b}, [a, b, batched](const Tensor& g, const Needs& n) -> Grads {
    auto mm = [batched](const Tensor& x, const Tensor& w, bool ta, bool tb) {
      return batched ? ops::bmm(x, w, ta, tb) : ops::matmul(x, w, ta, tb);
    };
    // dA = G B^T, dB = A^T G
    return {n[0] ? mm(g, b, false, true) : Tensor(), n[1] ? mm(a, g, true, false) : Tensor()};
  });
}

// ---- reductions ------------------------------------------------------------------------------

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Shape& in_shape = x.shape();
  return record("sum", ops::sum(x, dims, keepdim), {x},
                [in_shape, dims](const Tensor& g, const Needs&) -> Grads {
                  return {expand_reduced(g, in_shape, dims)};
                });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Shape& in_shape = x.shape();
  const double scale = 1.0 / static_cast<double>(reduced_count(in_shape, dims));
  return record("mean", ops::mean(x, dims, keepdim), {x},
                [in_shape, dims, scale](const Tensor& g, const Needs&) -> Grads {
                  // On a GPU the scaling kernel reads the broadcast view itself: one launch, not
                  // a copy and a scaling (ResNet's global average pooling). The CPU's fast path
                  // takes contiguous input.
                  const Tensor expanded =
                      g.is_cuda() ? g.reshape(keepdim_shape(in_shape, dims)).expand(in_shape)
                                  : expand_reduced(g, in_shape, dims);
                  return {ops::mul(expanded, scale)};
                });
}

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor y = ops::softmax(x, dim);
  Tensor y_saved = saved_output(y);
  return record("softmax", y, {x}, [y_saved, dim](const Tensor& g, const Needs&) -> Grads {
    return {ops::softmax_backward(g, y_saved, dim)};
  });
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor y = ops::log_softmax(x, dim);
  Tensor y_saved = saved_output(y);
  return record("log_softmax", y, {x}, [y_saved, dim](const Tensor& g, const Needs&) -> Grads {
    return {ops::log_softmax_backward(g, y_saved, dim)};
  });
}

// ---- shape -----------------------------------------------------------------------------------

Tensor reshape(const Tensor& x, const Shape& shape) {
  const Shape& in_shape = x.shape();
  return record(
      "reshape", x.reshape(shape), {x},
      [in_shape](const Tensor& g, const Needs&) -> Grads { return {g.reshape(in_shape)}; });
}

Tensor view(const Tensor& x, const Shape& shape) {
  ECH_CHECK(x.is_contiguous(), "view: ", x.describe(),
            " is not contiguous; use reshape (which copies when it must)");
  return reshape(x, shape);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const Shape& in_shape = x.shape();
  return record(
      "flatten", x.flatten(start_dim, end_dim), {x},
      [in_shape](const Tensor& g, const Needs&) -> Grads { return {g.reshape(in_shape)}; });
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  return record("transpose", ops::transpose(x, dim0, dim1), {x},
                [dim0, dim1](const Tensor& g, const Needs&) -> Grads {
                  return {ops::transpose(g, dim0, dim1)};
                });
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor y = ops::permute(x, dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], x.dim(), "permute")] = i;
  return record("permute", y, {x}, [inverse](const Tensor& g, const Needs&) -> Grads {
    return {ops::permute(g, inverse)};
  });
}

Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  ECH_CHECK(!xs.empty(), "concat: no tensors given");
  Tensor y = ops::concat(xs, dim);
  const int64_t d = wrap_dim(dim, xs[0].dim(), "concat");
  std::vector<int64_t> sizes;
  sizes.reserve(xs.size());
  for (const Tensor& x : xs) sizes.push_back(x.size(d));
  return record("concat", y, xs, [sizes, d](const Tensor& g, const Needs& n) -> Grads {
    Grads grads(sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (n[i]) grads[i] = g.narrow(d, start, sizes[i]).contiguous();
      start += sizes[i];
    }
    return grads;
  });
}

}  // namespace echelon
