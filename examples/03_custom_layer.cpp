// Tutorial 3: writing a custom layer, its naive CPU twin, and a gradient check.
//
// Softplus(x) = log(1 + exp(x)), d/dx = sigmoid(x). The recipe every op of Echelon follows:
//   1. the kernels: plain loops on raw pointers (tensor/cpu/<family>.cpp holds the library's
//      naive CPU twins; a CUDA op adds a launcher of the same name in cuda/kernels/<family>.cu);
//   2. the raw op: checks shapes/dtypes, allocates the output, dispatches on device and dtype,
//      and throws "not implemented on cuda" rather than silently falling back (tensor/ops_*.cpp);
//   3. the differentiable function: the raw op plus autograd::record with the gradient lambda
//      right beside the forward (autograd/functions_nn.cpp);
//   4. the Module that calls it (layers/*.h);
//   5. a float64 finite-difference gradcheck (autograd/gradcheck.h) and a comparison with a
//      reference built from existing ops.
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/autograd/node.h>  // autograd::record, for writing new differentiable ops
#include <echelon/echelon.h>

using namespace echelon;

namespace tutorial {

// ---- 1. the CPU twin: naive loops, accumulate in double ----
template <typename T>
void softplus_forward(int64_t count, const T* x, T* y) {
  for (int64_t i = 0; i < count; ++i) {
    const double v = static_cast<double>(x[i]);
    y[i] = static_cast<T>(v > 20 ? v : std::log1p(std::exp(v)));  // exp overflows past ~88
  }
}

template <typename T>
void softplus_backward(int64_t count, const T* grad_out, const T* x, T* grad_in) {
  for (int64_t i = 0; i < count; ++i) {
    const double sigmoid = 1.0 / (1.0 + std::exp(-static_cast<double>(x[i])));
    grad_in[i] = static_cast<T>(static_cast<double>(grad_out[i]) * sigmoid);
  }
}

// ---- 2. the raw ops: validate, allocate, dispatch ----
Tensor softplus_op(const Tensor& x_in) {
  ECH_CHECK(!x_in.is_cuda(), "softplus: not implemented on cuda");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.dtype() == kFloat32) {
    softplus_forward(x.numel(), x.data<float>(), y.data<float>());
  } else if (x.dtype() == kFloat64) {
    softplus_forward(x.numel(), x.data<double>(), y.data<double>());
  } else {
    ECH_FAIL("softplus: expected float32 or float64, got ", x.describe());
  }
  return y;
}

Tensor softplus_backward_op(const Tensor& grad_out_in, const Tensor& x_in) {
  const Tensor g = grad_out_in.contiguous(), x = x_in.contiguous();
  ECH_CHECK(g.shape() == x.shape() && g.dtype() == x.dtype(), "softplus_backward: gradient ",
            g.describe(), " does not match input ", x.describe());
  Tensor grad_in = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.dtype() == kFloat32) {
    softplus_backward(x.numel(), g.data<float>(), x.data<float>(), grad_in.data<float>());
  } else {
    softplus_backward(x.numel(), g.data<double>(), x.data<double>(), grad_in.data<double>());
  }
  return grad_in;
}

// ---- 3. the differentiable function: forward, and the gradient lambda beside it ----
// record() attaches a Node when grad mode is on and x requires grad. The lambda captures x by
// handle (a reference, not a copy: DESIGN.md "stale weights") and maps d loss/d y to d loss/d x.
Tensor softplus(const Tensor& x) {
  return autograd::record("softplus", softplus_op(x), {x},
                          [x](const Tensor& grad_out, const std::vector<bool>&) {
                            return std::vector<Tensor>{softplus_backward_op(grad_out, x)};
                          });
}

// ---- 4. the layer ----
class Softplus : public Module {
 public:
  Tensor forward(const Tensor& x) override { return softplus(x); }
  std::string name() const override { return "Softplus"; }
};

}  // namespace tutorial

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) ++failures;
  };
  Generator gen(3);

  // ---- 5a. gradcheck: central differences in float64 vs the analytic gradient ----
  Tensor x = ops::randn({3, 5}, gen, kFloat64).set_requires_grad(true);
  GradcheckReport alone =
      gradcheck([](const std::vector<Tensor>& in) { return tutorial::softplus(in[0]); }, {x});
  std::printf("     %s\n", alone.message.c_str());
  expect(alone.ok, "gradcheck of softplus");

  // Composed with a library op, every input requiring grad: gradients flow through both nodes.
  Tensor w = ops::randn({4, 5}, gen, kFloat64).set_requires_grad(true);
  Tensor b = ops::randn({4}, gen, kFloat64).set_requires_grad(true);
  GradcheckReport composed = gradcheck(
      [](const std::vector<Tensor>& in) { return tutorial::softplus(linear(in[0], in[1], in[2])); },
      {x, w, b});
  expect(composed.ok, "gradcheck of softplus(linear(x, w, b))");

  // ---- 5b. the same function built from existing differentiable ops: log(1 + exp(x)) ----
  Tensor xa = ops::randn({64}, gen, kFloat64).set_requires_grad(true);
  Tensor xb = xa.detach().clone().set_requires_grad(true);
  Tensor ours = tutorial::softplus(xa);
  Tensor reference = log(exp(xb) + 1.0);
  backward(sum(ours));
  backward(sum(reference));
  double worst_value = 0, worst_grad = 0;
  const auto ov = ours.to_vector<double>(), rv = reference.to_vector<double>();
  const auto og = xa.grad().to_vector<double>(), rg = xb.grad().to_vector<double>();
  for (size_t i = 0; i < ov.size(); ++i) {
    worst_value = std::max(worst_value, std::fabs(ov[i] - rv[i]));
    worst_grad = std::max(worst_grad, std::fabs(og[i] - rg[i]));
  }
  std::printf("     vs log(1 + exp(x)): max value error %.3g, max gradient error %.3g\n",
              worst_value, worst_grad);
  expect(worst_value < 1e-12 && worst_grad < 1e-12, "matches the reference built from ops");

  // ---- 5c. the layer inside a model: the Linear parameters receive gradients through it ----
  Sequential model;
  model.push_back(std::make_shared<Linear>(5, 8, gen));
  model.push_back(std::make_shared<tutorial::Softplus>());
  model.push_back(std::make_shared<Linear>(8, 2, gen));
  Tensor out = model.forward(ops::randn({6, 5}, gen));  // (6, 5) -> (6, 8) -> (6, 8) -> (6, 2)
  backward(mean(out));
  bool all_have_grads = true;
  for (const Tensor& p : model.parameters()) all_have_grads = all_have_grads && p.grad().defined();
  expect(out.shape() == Shape({6, 2}) && all_have_grads, "every parameter got a gradient");
  std::printf("%s", model.describe().c_str());
  std::printf("\n");

  // ---- and no silent fallback: a dtype the twin does not handle is an error ----
  try {
    tutorial::softplus(Tensor::zeros({2}, kInt64));
    expect(false, "int64 input is refused");
  } catch (const Error&) {
    expect(true, "int64 input is refused");
  }

  std::printf("%s\n", failures == 0 ? "all checks passed" : "some checks FAILED");
  return failures == 0 ? 0 : 1;
}
