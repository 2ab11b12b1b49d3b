// Tutorial 2: autograd by hand versus backward().
//
// A two-layer computation, loss = mean((relu(x W^T + b) - t)^2), differentiated twice:
//   (1) by hand, with the raw ops of tensor/ops.h, applying the chain rule step by step;
//   (2) by autograd: the functions of autograd/functions.h record one Node per op
//       (autograd/node.h, the gradient lambda sits beside each forward in autograd/functions*.cpp),
//       and backward() (autograd/engine.cpp) walks the graph from the loss to the leaves.
// Both must give the same gradients for W and b. Everything is float64 so they agree to ~1e-12.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <echelon/echelon.h>

using namespace echelon;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = x.size() == y.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i)
    worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

}  // namespace

int main() {
  Generator gen(7);
  const int64_t n = 5, in = 4, out = 3;
  Tensor x = ops::randn({n, in}, gen, kFloat64);    // (N, in)   input, no gradient needed
  Tensor t = ops::randn({n, out}, gen, kFloat64);   // (N, out)  target
  Tensor w = ops::randn({out, in}, gen, kFloat64);  // (out, in) parameter
  Tensor b = ops::randn({out}, gen, kFloat64);      // (out)     parameter
  w.set_requires_grad(true);
  b.set_requires_grad(true);

  // ---- (2) autograd: write the forward with the recording functions, then call backward ----
  Tensor z = linear(x, w, b);         // (N, out)  records node "linear"
  Tensor y = relu(z);                 // (N, out)  records node "relu"
  Tensor loss = mean(square(y - t));  // ()        records "sub", "square", "mean"
  std::printf("loss = %.6f, graph root: %s\n", loss.item<double>(), loss.grad_fn()->name().c_str());
  backward(loss);  // seeds d loss / d loss = 1 and accumulates into w.grad(), b.grad()

  // ---- (1) by hand: the same chain rule with raw ops, which never record ----
  const Tensor xd = x, wd = w.detach(), bd = b.detach();
  Tensor z_h = ops::add(ops::matmul(xd, wd, false, true), bd);  // x W^T + b     (N, out)
  Tensor y_h = ops::relu(z_h);                                  //               (N, out)
  Tensor diff = ops::sub(y_h, t);                               // y - t         (N, out)
  // d loss / d y = 2 (y - t) / (N * out): the mean divides by every element.
  Tensor g_y = ops::mul(diff, 2.0 / static_cast<double>(n * out));
  // relu passes the gradient only where z > 0. Written as a plain loop over host values, the
  // way the naive CPU twins in tensor/cpu/ are written.
  std::vector<double> g_z_values = g_y.to_vector<double>();
  const std::vector<double> z_values = z_h.to_vector<double>();
  for (size_t i = 0; i < g_z_values.size(); ++i)
    if (z_values[i] <= 0) g_z_values[i] = 0;
  Tensor g_z = Tensor::from_vector<double>(g_z_values, {n, out});  // (N, out)
  Tensor g_w = ops::matmul(g_z, xd, true, false);                  // g_z^T x        (out, in)
  Tensor g_b = ops::sum(g_z, {0});                                 // sum over rows  (out)

  const double err_w = max_abs_diff(g_w, w.grad());
  const double err_b = max_abs_diff(g_b, b.grad());
  std::printf("max |dW_hand - dW_autograd| = %.3g\n", err_w);
  std::printf("max |db_hand - db_autograd| = %.3g\n", err_b);

  // A second backward accumulates (+=) into .grad, as in PyTorch; zero_grad() drops it.
  Tensor loss2 = mean(square(relu(linear(x, w, b)) - t));
  backward(loss2);
  const double err_twice = max_abs_diff(ops::mul(g_w, 2.0), w.grad());
  std::printf("after a second backward, dW = 2 * dW_hand: error %.3g\n", err_twice);
  w.zero_grad();
  const bool dropped = !w.grad().defined();

  const bool ok = err_w < 1e-12 && err_b < 1e-12 && err_twice < 1e-12 && dropped;
  std::printf("%s\n", ok ? "gradients agree" : "gradients DIFFER");
  return ok ? 0 : 1;
}
