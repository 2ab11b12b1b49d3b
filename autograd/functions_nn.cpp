// Differentiable neural-network functions over the raw NN ops (conv, pool, norm, loss).
#include <initializer_list>
#include <memory>
#include <utility>

#include <echelon/autograd/engine.h>
#include <echelon/autograd/functions.h>
#include <echelon/autograd/node.h>
#include <echelon/base/error.h>

namespace echelon {

using autograd::record;
using autograd::record_adding;
using Grads = std::vector<Tensor>;
using Needs = std::vector<bool>;

namespace {
Tensor saved_output(const Tensor& y) {
  return make_view(y, y.shape(), y.strides(), y.offset());
}

// Whether a fusing pair runs as one kernel for x: where one exists (CUDA, the fast CPU path) and
// fusion is on (ops::set_fused_ops).
bool fused_kernels_for(const Tensor& x) {
  return ops::fused_ops() && (x.is_cuda() || ops::cpu_kernels() == ops::CpuKernels::Fast);
}

// linear's checks, and its forward without the autograd record: x (N, in) -> (N, out).
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, bool relu) {
  ECH_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1), "linear: input ",
            x.shape(), " does not match weight ", weight.shape(), " (expected input (N, ",
            weight.dim() == 2 ? weight.size(1) : -1, "))");
  ECH_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "linear: bias ", bias.shape(),
            " does not match weight ", weight.shape());
  Tensor y = ops::matmul(x, weight, false, true);  // (N, out), fresh: the bias goes in in place
  if (bias.defined()) ops::add_row_bias_(y, bias, relu);
  return y;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = linear_forward(x, weight, bias, /*relu=*/false);
  return record("linear", y, {x, weight, bias},
                [x, weight](const Tensor& g, const Needs& n) -> Grads {
                  return {n[0] ? ops::matmul(g, weight) : Tensor(),          // (N, in)
                          n[1] ? ops::matmul(g, x, true, false) : Tensor(),  // (out, in)
                          n[2] ? ops::sum(g, {0}) : Tensor()};               // (out)
                });
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!fused_kernels_for(x) || !bias.defined()) return relu(linear(x, weight, bias));
  Tensor y = linear_forward(x, weight, bias, /*relu=*/true);
  Tensor y_saved = saved_output(y);
  return record("linear_relu", y, {x, weight, bias},
                [x, weight, y_saved](const Tensor& g, const Needs& n) -> Grads {
                  ops::MaskedColumnSums r = ops::relu_backward_column_sums(g, y_saved);
                  return {n[0] ? ops::matmul(r.masked, weight) : Tensor(),          // (N, in)
                          n[1] ? ops::matmul(r.masked, x, true, false) : Tensor(),  // (out, in)
                          n[2] ? std::move(r.sums) : Tensor()};                     // (out)
                });
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dGeometry& window) {
  Tensor y = ops::conv2d(x, weight, bias, window);
  const bool has_bias = bias.defined();
  // The input's gradient is added into its sum so far when the engine hands one over (a ResNet
  // block's input, whose shortcut's gradient arrived first).
  return record_adding(
      "conv2d", y, {x, weight, bias},
      [x, weight, has_bias, window](const Tensor& g, const Needs& n,
                                    const std::vector<Tensor>& sums) -> Grads {
        ops::Conv2dGrads r = ops::conv2d_backward(g, x, weight, has_bias, n[0], window,
                                                  /*need_weight=*/true, n[0] ? sums[0] : Tensor());
        return {n[0] ? r.input : Tensor(), n[1] ? r.weight : Tensor(), n[2] ? r.bias : Tensor()};
      });
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Conv2dGeometry& window) {
  if (!fused_kernels_for(x)) return relu(conv2d(x, weight, bias, window));
  Tensor y = ops::conv2d(x, weight, bias, window, /*relu=*/true);
  Tensor y_saved = saved_output(y);
  const bool has_bias = bias.defined();
  return record_adding(
      "conv2d_relu", y, {x, weight, bias},
      [x, weight, has_bias, window, y_saved](const Tensor& g, const Needs& n,
                                             const std::vector<Tensor>& sums) -> Grads {
        ops::Conv2dGrads r =
            ops::conv2d_backward(g, x, weight, has_bias, n[0], window, /*need_weight=*/true,
                                 n[0] ? sums[0] : Tensor(), /*relu_out=*/y_saved);
        return {n[0] ? r.input : Tensor(), n[1] ? r.weight : Tensor(), n[2] ? r.bias : Tensor()};
      });
}

Tensor max_pool2d(const Tensor& x, const Pool2dGeometry& window) {
  Tensor argmax;
  Tensor y = ops::max_pool2d(x, window, &argmax);
  const Shape& in_shape = x.shape();
  return record("max_pool2d", y, {x},
                [argmax, in_shape, window](const Tensor& g, const Needs&) -> Grads {
                  return {ops::max_pool2d_backward(g, argmax, in_shape, window)};
                });
}

Tensor relu_max_pool2d(const Tensor& x, const Pool2dGeometry& window) {
  if (!fused_kernels_for(x)) return max_pool2d(relu(x), window);
  Tensor argmax;
  Tensor y = ops::max_pool2d(x, window, &argmax, /*relu_first=*/true);
  Tensor y_saved = saved_output(y);
  const Shape& in_shape = x.shape();
  return record("relu_max_pool2d", y, {x},
                [argmax, y_saved, in_shape, window](const Tensor& g, const Needs&) -> Grads {
                  // relu(x) at an argmax is the pooled y there, so the ReLU's mask at the routed
                  // positions is y > 0: applied to the pooled gradient in the pooling's backward,
                  // it gives the composition's gradient (0 + the same terms, in the same order).
                  return {ops::max_pool2d_backward(g, argmax, in_shape, window, y_saved)};
                });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dGeometry& window) {
  const Shape& in_shape = x.shape();
  return record("avg_pool2d", ops::avg_pool2d(x, window), {x},
                [in_shape, window](const Tensor& g, const Needs&) -> Grads {
                  return {ops::avg_pool2d_backward(g, in_shape, window)};
                });
}

Tensor global_avg_pool2d(const Tensor& x) {
  ECH_CHECK(x.dim() == 4, "global_avg_pool2d: expected (N, C, H, W), got ", x.shape());
  return mean(x, {2, 3}, /*keepdim=*/true);
}

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps) {
  ECH_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm: expected (N, C) or (N, C, H, W), got ",
            x.shape());
  const int64_t channels = x.size(1);
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var}) {
    ECH_CHECK(t->defined() && t->shape() == Shape{channels}, "batch_norm: input ", x.shape(),
              " has ", channels, " channels but a parameter/statistic has shape ",
              t->defined() ? t->shape() : Shape{});
  }
  if (training) {
    ops::BatchNormOutput out =
        ops::batch_norm_train(x, gamma, beta, running_mean, running_var, momentum, eps);
    Tensor mean = out.save_mean, invstd = out.save_invstd;
    return record(
        "batch_norm", out.out, {x, gamma, beta},
        [x, gamma, mean, invstd](const Tensor& g, const Needs& n) -> Grads {
          ops::BatchNormGrads r = ops::batch_norm_backward(g, x, gamma, mean, invstd);
          return {n[0] ? r.input : Tensor(), n[1] ? r.gamma : Tensor(), n[2] ? r.beta : Tensor()};
        });
  }
  Tensor y = ops::batch_norm_eval(x, gamma, beta, running_mean, running_var, eps);
  // Eval mode is an affine map per channel: y = gamma * (x - mean) * invstd + beta.
  Tensor rm = running_mean, rv = running_var;
  return record("batch_norm_eval", y, {x, gamma, beta},
                [x, gamma, rm, rv, eps](const Tensor& g, const Needs& n) -> Grads {
                  Shape channel_shape(x.dim(), 1);
                  channel_shape[1] = x.size(1);
                  std::vector<int64_t> other_dims{0};
                  for (int64_t d = 2; d < x.dim(); ++d) other_dims.push_back(d);
                  Tensor invstd =
                      ops::reciprocal(ops::sqrt(ops::add(rv, eps))).reshape(channel_shape);
                  Grads grads(3);
                  if (n[0]) grads[0] = ops::mul(g, ops::mul(gamma.reshape(channel_shape), invstd));
                  if (n[1]) {
                    Tensor xhat = ops::mul(ops::sub(x, rm.reshape(channel_shape)), invstd);
                    grads[1] = ops::sum(ops::mul(g, xhat), other_dims);
                  }
                  if (n[2]) grads[2] = ops::sum(g, other_dims);
                  return grads;
                });
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       Tensor& running_mean, Tensor& running_var, bool training, double momentum,
                       double eps) {
  if (!training || !fused_kernels_for(x))
    return relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps));
  ECH_CHECK(x.dim() == 2 || x.dim() == 4, "batch_norm_relu: expected (N, C) or (N, C, H, W), got ",
            x.shape());
  ops::BatchNormOutput out = ops::batch_norm_train(x, gamma, beta, running_mean, running_var,
                                                   momentum, eps, /*relu=*/true);
  Tensor mean = out.save_mean, invstd = out.save_invstd, y_saved = saved_output(out.out);
  // The forward's own scale and shift (a copy: a stale gamma read in backward would change them):
  // the backward recomputes the ReLU's mask from x with them and does not read y.
  Tensor affine = out.save_affine;
  return record(
      "batch_norm_relu", out.out, {x, gamma, beta},
      [x, gamma, mean, invstd, y_saved, affine](const Tensor& g, const Needs& n) -> Grads {
        ops::BatchNormGrads r =
            ops::batch_norm_backward(g, x, gamma, mean, invstd, /*relu_out=*/y_saved,
                                     /*want_masked=*/false, /*relu_affine=*/affine);
        return {n[0] ? r.input : Tensor(), n[1] ? r.gamma : Tensor(), n[2] ? r.beta : Tensor()};
      });
}

Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           bool training, double momentum, double eps) {
  if (!training || !fused_kernels_for(x))
    return relu(batch_norm(x, gamma, beta, running_mean, running_var, training, momentum, eps) +
                residual);
  ECH_CHECK(x.dim() == 2 || x.dim() == 4,
            "batch_norm_add_relu: expected (N, C) or (N, C, H, W), got ", x.shape());
  ops::BatchNormOutput out = ops::batch_norm_train(x, gamma, beta, running_mean, running_var,
                                                   momentum, eps, /*relu=*/true, residual);
  Tensor mean = out.save_mean, invstd = out.save_invstd, y_saved = saved_output(out.out);
  return record("batch_norm_add_relu", out.out, {x, residual, gamma, beta},
                [x, gamma, mean, invstd, y_saved](const Tensor& g, const Needs& n) -> Grads {
                  ops::BatchNormGrads r =
                      ops::batch_norm_backward(g, x, gamma, mean, invstd,
                                               /*relu_out=*/y_saved, /*want_masked=*/n[1]);
                  return {n[0] ? r.input : Tensor(), r.masked, n[2] ? r.gamma : Tensor(),
                          n[3] ? r.beta : Tensor()};
                });
}

Tensor lrn(const Tensor& x, int64_t size, double alpha, double beta, double k) {
  ECH_CHECK(size >= 1, "lrn: size must be >= 1, got ", size);
  Tensor scale;
  Tensor y = ops::lrn(x, size, alpha, beta, k, &scale);
  Tensor y_saved = saved_output(y);
  return record("lrn", y, {x},
                [x, y_saved, scale, size, alpha, beta, k](const Tensor& g, const Needs&) -> Grads {
                  return {ops::lrn_backward(g, x, y_saved, scale, size, alpha, beta, k)};
                });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  ECH_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  Tensor mask = ops::dropout_mask(x.shape(), p, gen, x.device());
  if (mask.dtype() != x.dtype()) mask = ops::cast(mask, x.dtype());
  return record("dropout", ops::mul(x, mask), {x},
                [mask](const Tensor& g, const Needs&) -> Grads { return {ops::mul(g, mask)}; });
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, ops::StepStatistics* statistics) {
  Tensor log_probs;
  // A training step's backward starts here with the shared seed 1 (autograd::is_unit_seed): the
  // forward's kernel then writes the logits' gradient too (on CUDA, where one block takes the
  // batch), handed on once with no backward launch; any other upstream gradient, or a second
  // backward (retain_graph), runs cross_entropy_backward.
  auto unit_grad = std::make_shared<Tensor>();
  const bool wants_grad = grad_enabled() && logits.requires_grad();
  Tensor loss = ops::cross_entropy(logits, target, &log_probs,
                                   wants_grad ? unit_grad.get() : nullptr, statistics);
  return record("cross_entropy", loss, {logits},
                [log_probs, target, unit_grad](const Tensor& g, const Needs&) -> Grads {
                  if (unit_grad->defined() && autograd::is_unit_seed(g))
                    return {std::exchange(*unit_grad, Tensor())};
                  return {ops::cross_entropy_backward(g, log_probs, target)};
                });
}

}  // namespace echelon
