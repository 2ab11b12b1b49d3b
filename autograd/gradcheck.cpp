#include <echelon/autograd/gradcheck.h>

#include <cmath>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/random.h>

namespace echelon {

namespace {
// L = sum(fn(inputs) * weights) in float64, without recording.
double weighted_output(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                       const Tensor& weights) {
  NoGradGuard no_grad;
  Tensor out = fn(inputs);
  return ops::sum(ops::mul(out, weights)).item<double>();
}
}  // namespace

GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps,
                          double atol, double rtol) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    ECH_CHECK(x.dtype() == kFloat64 && x.device().is_cpu() && x.is_contiguous() && x.is_leaf(),
              "gradcheck: input ", i, " must be a contiguous float64 CPU leaf, got ", x.describe());
  }
  // Analytic: backward of L with weights r gives dL/dx.
  Tensor out = fn(inputs);
  ECH_CHECK(out.requires_grad(), "gradcheck: the output does not require grad");
  Generator gen(0x9e3779b97f4a7c15ULL);
  // Weights in [0.5, 1.5): never zero, so no output element escapes the check.
  Tensor weights = ops::add(ops::rand(out.shape(), gen, kFloat64), 0.5);
  for (Tensor x : inputs) {  // a handle copy: zero_grad acts on the shared TensorImpl
    if (x.defined() && x.requires_grad()) x.zero_grad();
  }
  backward(out, weights);

  GradcheckReport report;
  double worst_excess = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor grad = x.grad();
    std::vector<double> analytic =
        grad.defined() ? grad.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    double* values = x.data<double>();
    for (int64_t e = 0; e < x.numel(); ++e) {
      const double original = values[e];
      values[e] = original + eps;
      const double plus = weighted_output(fn, inputs, weights);
      values[e] = original - eps;
      const double minus = weighted_output(fn, inputs, weights);
      values[e] = original;
      const double numeric = (plus - minus) / (2 * eps);
      const double error = std::abs(analytic[e] - numeric);
      const double excess = error - (atol + rtol * std::abs(numeric));
      ++report.checked;
      if (error > report.max_abs_error) report.max_abs_error = error;
      if (excess > worst_excess || std::isnan(error)) {
        worst_excess = std::isnan(error) ? INFINITY : excess;
        report.worst_input = static_cast<int64_t>(i);
        report.worst_element = e;
        report.analytic = analytic[e];
        report.numeric = numeric;
      }
    }
  }
  report.ok = worst_excess <= 0;
  report.message =
      str(report.ok ? "gradcheck passed" : "gradcheck FAILED", ": ", report.checked,
          " elements, max |analytic - numeric| = ", report.max_abs_error, "; worst at input ",
          report.worst_input, " element ", report.worst_element, ": analytic ", report.analytic,
          " vs numeric ", report.numeric, " (atol ", atol, ", rtol ", rtol, ")");
  return report;
}

}  // namespace echelon
