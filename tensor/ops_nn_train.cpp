// Dispatch of the neural-network ops, part 2: batch norm, LRN, dropout mask, cross-entropy and
// SGD (tensor/ops.h, last section). Same pattern as tensor/ops_nn.cpp: check, make contiguous,
// call the naive CPU twin (tensor/cpu/{norm,loss,optim}) or the CUDA launcher of the same name.
#include <algorithm>
#include <vector>

#include <echelon/tensor/cpu/elementwise.h>
#include <echelon/tensor/cpu/fast/nn.h>
#include <echelon/tensor/cpu/fast/optim.h>
#include <echelon/tensor/cpu/loss.h>
#include <echelon/tensor/cpu/norm.h>
#include <echelon/tensor/cpu/optim.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/loss.h>
#include <echelon/cuda/kernels/norm.h>
#include <echelon/cuda/kernels/optim.h>
#endif

namespace echelon::ops {

using detail::check_defined;
using detail::check_float_like;
using detail::check_shape;
using detail::check_step_statistics;
using detail::fail_not_cuda_build;
using detail::ptr_or_null;
#if ECHELON_WITH_CUDA
using detail::stream_of;
#endif

// ---- norm -------------------------------------------------------------------------------------

namespace {

// x (N, C, ...) viewed as (N, C, S).
NormArgs norm_args(const Tensor& x, const char* op) {
  check_float_like(op, x, x, "input");
  ECH_CHECK(x.dim() >= 2, op, ": input must be (N, C) or (N, C, ...), got shape ", x.shape());
  NormArgs a;
  a.n = x.size(0);
  a.c = x.size(1);
  for (int64_t d = 2; d < x.dim(); ++d) a.spatial *= x.size(d);
  return a;
}

// A per-channel tensor (C): undefined allowed when `optional`.
Tensor per_channel(const Tensor& t, const Tensor& x, int64_t channels, bool optional,
                   const char* op, const char* what) {
  if (!t.defined()) {
    ECH_CHECK(optional, op, ": ", what, " is undefined");
    return t;
  }
  check_float_like(op, t, x, what);
  check_shape(op, t, {channels}, what);
  return t.contiguous();
}

}  // namespace

BatchNormOutput batch_norm_train(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                                 Tensor& running_mean, Tensor& running_var, double momentum,
                                 double eps, bool relu, const Tensor& residual_in) {
  const char* op = residual_in.defined() ? "batch_norm_train (fused residual add + ReLU)"
                   : relu                ? "batch_norm_train (fused ReLU)"
                                         : "batch_norm_train";
  const NormArgs a = norm_args(x_in, op);
  ECH_CHECK(a.n * a.spatial > 1, op,
            ": expected more than 1 value per channel when training, got input shape ",
            x_in.shape());
  ECH_CHECK(eps > 0 && momentum >= 0 && momentum <= 1, op,
            ": need eps > 0 and momentum in [0, 1], got eps ", eps, ", momentum ", momentum);
  const Tensor x = x_in.contiguous();
  const Tensor gamma = per_channel(gamma_in, x, a.c, true, op, "gamma");
  const Tensor beta = per_channel(beta_in, x, a.c, true, op, "beta");
  Tensor residual;
  if (residual_in.defined()) {
    ECH_CHECK(relu, op, ": a residual is only fused together with the ReLU");
    check_float_like(op, residual_in, x, "residual");
    check_shape(op, residual_in, x.shape(), "residual");
    residual = residual_in.contiguous();
  }
  ECH_CHECK(running_mean.defined() == running_var.defined(), op,
            ": running_mean and running_var must be both defined or both undefined");
  if (running_mean.defined()) {
    per_channel(running_mean, x, a.c, false, op, "running_mean");
    per_channel(running_var, x, a.c, false, op, "running_var");
    ECH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(), op,
              ": running statistics are updated in place and must be contiguous");
  }
  BatchNormOutput out;
  out.out = Tensor::empty(x.shape(), x.dtype(), x.device());
  out.save_mean = Tensor::empty({a.c}, x.dtype(), x.device());
  out.save_invstd = Tensor::empty({a.c}, x.dtype(), x.device());
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::batch_norm_train_forward(
        a, x.data<float>(), ptr_or_null<float>(gamma), ptr_or_null<float>(beta),
        running_mean.defined() ? running_mean.data<float>() : nullptr,
        running_var.defined() ? running_var.data<float>() : nullptr, momentum, eps, relu,
        ptr_or_null<float>(residual), out.out.data<float>(), out.save_mean.data<float>(),
        out.save_invstd.data<float>(), stream_of(x));
#else
    fail_not_cuda_build(op);
#endif
  } else {
    const bool fast = cpu_kernels() == CpuKernels::Fast;
    ECH_DISPATCH_FLOATING(x.dtype(), op, {
      if (fast && relu) {
        if (!residual.defined()) out.save_affine = Tensor::empty({a.c, 2}, x.dtype(), x.device());
        cpu::fast::batch_norm_relu_train_forward<scalar_t>(
            a, x.data<scalar_t>(), ptr_or_null<scalar_t>(gamma), ptr_or_null<scalar_t>(beta),
            running_mean.defined() ? running_mean.data<scalar_t>() : nullptr,
            running_var.defined() ? running_var.data<scalar_t>() : nullptr, momentum, eps,
            out.out.data<scalar_t>(), out.save_mean.data<scalar_t>(),
            out.save_invstd.data<scalar_t>(), ptr_or_null<scalar_t>(residual),
            out.save_affine.defined() ? out.save_affine.data<scalar_t>() : nullptr);
        return out;
      }
      (fast ? cpu::fast::batch_norm_train_forward<scalar_t>
            : cpu::batch_norm_train_forward<scalar_t>)(a, x.data<scalar_t>(),
                                                       ptr_or_null<scalar_t>(gamma),
                                                       ptr_or_null<scalar_t>(beta),
                                                       running_mean.defined()
                                                           ? running_mean.data<scalar_t>()
                                                           : nullptr,
                                                       running_var.defined()
                                                           ? running_var.data<scalar_t>()
                                                           : nullptr,
                                                       momentum, eps, out.out.data<scalar_t>(),
                                                       out.save_mean.data<scalar_t>(),
                                                       out.save_invstd.data<scalar_t>());
      if (relu) {  // naive: the twins' composition, the fast path's oracle
        scalar_t* y = out.out.data<scalar_t>();
        const auto index = detail::indexer_of(out.out);
        if (residual.defined())
          cpu::binary(BinaryOp::Add, y, index, residual.data<scalar_t>(),
                      detail::indexer_of(residual), y, out.out.numel());
        cpu::unary(UnaryOp::Relu, y, index, y, out.out.numel());
      }
    });
  }
  return out;
}

Tensor batch_norm_eval(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                       const Tensor& running_mean_in, const Tensor& running_var_in, double eps) {
  const char* op = "batch_norm_eval";
  const NormArgs a = norm_args(x_in, op);
  ECH_CHECK(eps > 0, op, ": need eps > 0, got ", eps);
  const Tensor x = x_in.contiguous();
  const Tensor gamma = per_channel(gamma_in, x, a.c, true, op, "gamma");
  const Tensor beta = per_channel(beta_in, x, a.c, true, op, "beta");
  const Tensor running_mean = per_channel(running_mean_in, x, a.c, false, op, "running_mean");
  const Tensor running_var = per_channel(running_var_in, x, a.c, false, op, "running_var");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::batch_norm_eval_forward(a, x.data<float>(), ptr_or_null<float>(gamma),
                                  ptr_or_null<float>(beta), running_mean.data<float>(),
                                  running_var.data<float>(), eps, y.data<float>(), stream_of(x));
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    cpu::batch_norm_eval_forward(a, x.data<scalar_t>(), ptr_or_null<scalar_t>(gamma),
                                 ptr_or_null<scalar_t>(beta), running_mean.data<scalar_t>(),
                                 running_var.data<scalar_t>(), eps, y.data<scalar_t>());
  });
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& grad_out_in, const Tensor& x_in,
                                   const Tensor& gamma_in, const Tensor& save_mean_in,
                                   const Tensor& save_invstd_in, const Tensor& relu_out_in,
                                   bool want_masked, const Tensor& relu_affine_in) {
  const bool relu = relu_out_in.defined();
  const char* op = relu ? "batch_norm_backward (fused ReLU)" : "batch_norm_backward";
  const NormArgs a = norm_args(x_in, op);
  check_float_like(op, grad_out_in, x_in, "grad_out");
  check_shape(op, grad_out_in, x_in.shape(), "grad_out");
  ECH_CHECK(relu || !want_masked, op, ": the masked gradient needs relu_out");
  ECH_CHECK(!relu_affine_in.defined() || (relu && !want_masked), op,
            ": relu_affine goes with relu_out and without the masked gradient");
  Tensor relu_affine;
  if (relu_affine_in.defined()) {
    check_float_like(op, relu_affine_in, x_in, "relu_affine");
    check_shape(op, relu_affine_in, Shape{a.c, 2}, "relu_affine");
    relu_affine = relu_affine_in.contiguous();
  }
  if (relu) {
    check_float_like(op, relu_out_in, x_in, "relu_out");
    check_shape(op, relu_out_in, x_in.shape(), "relu_out");
  }
  const Tensor x = x_in.contiguous(), relu_out = relu ? relu_out_in.contiguous() : Tensor();
  Tensor grad_out = grad_out_in.contiguous();
  const Tensor gamma = per_channel(gamma_in, x, a.c, true, op, "gamma");
  const Tensor save_mean = per_channel(save_mean_in, x, a.c, false, op, "save_mean");
  const Tensor save_invstd = per_channel(save_invstd_in, x, a.c, false, op, "save_invstd");
  BatchNormGrads grads;
  grads.input = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (gamma.defined()) {
    grads.gamma = Tensor::empty({a.c}, x.dtype(), x.device());
    grads.beta = Tensor::empty({a.c}, x.dtype(), x.device());
  }
  if (want_masked) grads.masked = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.is_cuda()) {  // relu_affine is the fast CPU path's shortcut: CUDA reads relu_out
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::batch_norm_backward(
        a, grad_out.data<float>(), ptr_or_null<float>(relu_out), x.data<float>(),
        ptr_or_null<float>(gamma), save_mean.data<float>(), save_invstd.data<float>(),
        grads.input.data<float>(), grads.gamma.defined() ? grads.gamma.data<float>() : nullptr,
        grads.beta.defined() ? grads.beta.data<float>() : nullptr,
        grads.masked.defined() ? grads.masked.data<float>() : nullptr, stream_of(x));
    return grads;
#else
    fail_not_cuda_build(op);
#endif
  }
  const bool fast = cpu_kernels() == CpuKernels::Fast;
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    if (relu && fast) {
      cpu::fast::batch_norm_relu_backward<scalar_t>(
          a, grad_out.data<scalar_t>(), relu_out.data<scalar_t>(), x.data<scalar_t>(),
          ptr_or_null<scalar_t>(gamma), save_mean.data<scalar_t>(), save_invstd.data<scalar_t>(),
          grads.input.data<scalar_t>(),
          grads.gamma.defined() ? grads.gamma.data<scalar_t>() : nullptr,
          grads.beta.defined() ? grads.beta.data<scalar_t>() : nullptr,
          grads.masked.defined() ? grads.masked.data<scalar_t>() : nullptr,
          ptr_or_null<scalar_t>(relu_affine));
      return grads;
    }
    if (relu) {  // the twins' composition: ReLU's backward (y > 0 where its input was), then BN's
      Tensor masked = want_masked ? grads.masked : Tensor::empty(x.shape(), x.dtype(), x.device());
      cpu::unary_backward(UnaryOp::Relu, grad_out.data<scalar_t>(), relu_out.data<scalar_t>(),
                          relu_out.data<scalar_t>(), masked.data<scalar_t>(), x.numel());
      grad_out = masked;
    }
    (fast ? cpu::fast::batch_norm_backward<scalar_t>
          : cpu::batch_norm_backward<scalar_t>)(a, grad_out.data<scalar_t>(), x.data<scalar_t>(),
                                                ptr_or_null<scalar_t>(gamma),
                                                save_mean.data<scalar_t>(),
                                                save_invstd.data<scalar_t>(),
                                                grads.input.data<scalar_t>(),
                                                grads.gamma.defined() ? grads.gamma.data<scalar_t>()
                                                                      : nullptr,
                                                grads.beta.defined() ? grads.beta.data<scalar_t>()
                                                                     : nullptr);
  });
  return grads;
}

Tensor lrn(const Tensor& x_in, int64_t size, double alpha, double beta, double k, Tensor* scale) {
  const char* op = "lrn";
  const NormArgs a = norm_args(x_in, op);
  ECH_CHECK(size >= 1, op, ": size must be positive, got ", size);
  ECH_CHECK(k > 0 && alpha >= 0, op, ": need k > 0 and alpha >= 0, got k ", k, ", alpha ", alpha);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor sc = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (scale) *scale = sc;
  if (y.numel() == 0) return y;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::lrn_forward(a, size, alpha, beta, k, x.data<float>(), y.data<float>(), sc.data<float>(),
                      stream_of(x));
    return y;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    cpu::lrn_forward(a, size, alpha, beta, k, x.data<scalar_t>(), y.data<scalar_t>(),
                     sc.data<scalar_t>());
  });
  return y;
}

Tensor lrn_backward(const Tensor& grad_out_in, const Tensor& x_in, const Tensor& y_in,
                    const Tensor& scale_in, int64_t size, double alpha, double beta, double k) {
  const char* op = "lrn_backward";
  const NormArgs a = norm_args(x_in, op);
  ECH_CHECK(size >= 1, op, ": size must be positive, got ", size);
  for (const Tensor* t : {&grad_out_in, &y_in, &scale_in}) {
    check_float_like(op, *t, x_in, "grad_out/y/scale");
    check_shape(op, *t, x_in.shape(), "grad_out/y/scale");
  }
  const Tensor x = x_in.contiguous(), grad_out = grad_out_in.contiguous(), y = y_in.contiguous(),
               scale = scale_in.contiguous();
  Tensor grad_in = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (grad_in.numel() == 0) return grad_in;
  if (x.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(x.device().index);
    cuda::lrn_backward(a, size, alpha, beta, grad_out.data<float>(), x.data<float>(),
                       y.data<float>(), scale.data<float>(), grad_in.data<float>(), stream_of(x));
    return grad_in;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(x.dtype(), op, {
    cpu::lrn_backward(a, size, alpha, beta, grad_out.data<scalar_t>(), x.data<scalar_t>(),
                      y.data<scalar_t>(), scale.data<scalar_t>(), grad_in.data<scalar_t>());
  });
  return grad_in;
}

Tensor dropout_mask(const Shape& shape, double p, Generator& gen, Device device) {
  const char* op = "dropout_mask";
  ECH_CHECK(p >= 0.0 && p <= 1.0, op, ": probability must be in [0, 1], got ", p);
  Tensor mask = Tensor::empty(shape, kFloat32, device);
  const int64_t count = mask.numel();
  const PhiloxState state = gen.reserve(static_cast<uint64_t>(count));
  if (count == 0) return mask;
  if (device.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(device.index);
    cuda::dropout_mask(count, p, state, mask.data<float>(), stream_of(mask));
    return mask;
#else
    fail_not_cuda_build(op);
#endif
  }
  cpu::dropout_mask(count, p, state, mask.data<float>());
  return mask;
}

// ---- loss -------------------------------------------------------------------------------------

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in, Tensor* log_probs_out,
                     Tensor* unit_grad, StepStatistics* statistics) {
  const char* op = "cross_entropy";
  check_float_like(op, logits_in, logits_in, "logits");
  check_defined(op, target_in, "target");
  ECH_CHECK(logits_in.dim() == 2, op, ": logits must be (N, classes), got shape ",
            logits_in.shape());
  const int64_t n = logits_in.size(0), classes = logits_in.size(1);
  ECH_CHECK(n > 0 && classes > 0, op, ": logits ", logits_in.shape(), " must be non-empty");
  ECH_CHECK(target_in.dtype() == kInt64 && target_in.device() == logits_in.device(), op,
            ": target must be int64 on ", logits_in.device(), ", got ", target_in.describe());
  check_shape(op, target_in, {n}, "target");
  const Tensor logits = logits_in.contiguous(), target = target_in.contiguous();
  if (unit_grad) *unit_grad = Tensor();  // the CUDA one-block path's alone
  Tensor log_probs = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  if (statistics)
    check_step_statistics(logits, target, loss, statistics->guard, statistics->correct);
  bool counted = false;  // the statistics, by the loss's kernel
  int64_t bad_row = -1;
  if (logits.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(logits.device().index);
    const bool one_block = cuda::cross_entropy_one_block_fits(n, classes);
    Tensor grad;
    if (unit_grad && one_block)
      grad = Tensor::empty(logits.shape(), logits.dtype(), logits.device());
    counted = statistics && one_block;
    bad_row = cuda::cross_entropy_forward(n, classes, logits.data<float>(), target.data<int64_t>(),
                                          log_probs.data<float>(), loss.data<float>(),
                                          logits.device().index, stream_of(logits),
                                          grad.defined() ? grad.data<float>() : nullptr,
                                          counted ? statistics->correct.data<float>() : nullptr,
                                          counted ? statistics->guard.data<float>() : nullptr);
    if (unit_grad) *unit_grad = grad;
#else
    fail_not_cuda_build(op);
#endif
  } else {
    ECH_DISPATCH_FLOATING(logits.dtype(), op, {
      bad_row =
          cpu::cross_entropy_forward(n, classes, logits.data<scalar_t>(), target.data<int64_t>(),
                                     log_probs.data<scalar_t>(), loss.data<scalar_t>());
    });
  }
  if (bad_row >= 0) {
    const int64_t value = target.select(0, bad_row).item<int64_t>();
    ECH_FAIL(op, ": target[", bad_row, "] = ", value, " is not a class index in [0, ", classes,
             ") (logits ", logits.shape(), ")");
  }
  if (statistics && !counted)
    step_statistics(logits, target, loss, statistics->guard, statistics->correct);
  if (log_probs_out) *log_probs_out = log_probs;
  return loss;
}

Tensor cross_entropy_backward(const Tensor& grad_loss_in, const Tensor& log_probs_in,
                              const Tensor& target_in) {
  const char* op = "cross_entropy_backward";
  check_float_like(op, log_probs_in, log_probs_in, "log_probs");
  check_float_like(op, grad_loss_in, log_probs_in, "grad_loss");
  ECH_CHECK(grad_loss_in.numel() == 1, op, ": grad_loss must hold one value, got shape ",
            grad_loss_in.shape());
  ECH_CHECK(log_probs_in.dim() == 2, op, ": log_probs must be (N, classes), got shape ",
            log_probs_in.shape());
  const int64_t n = log_probs_in.size(0), classes = log_probs_in.size(1);
  check_defined(op, target_in, "target");
  ECH_CHECK(target_in.dtype() == kInt64 && target_in.device() == log_probs_in.device(), op,
            ": target must be int64 on ", log_probs_in.device(), ", got ", target_in.describe());
  check_shape(op, target_in, {n}, "target");
  const Tensor grad_loss = grad_loss_in.contiguous(), log_probs = log_probs_in.contiguous(),
               target = target_in.contiguous();
  Tensor grad = Tensor::empty(log_probs.shape(), log_probs.dtype(), log_probs.device());
  if (grad.numel() == 0) return grad;
  if (log_probs.is_cuda()) {
#if ECHELON_WITH_CUDA
    cuda::DeviceGuard guard(log_probs.device().index);
    cuda::cross_entropy_backward(n, classes, grad_loss.data<float>(), log_probs.data<float>(),
                                 target.data<int64_t>(), grad.data<float>(), stream_of(log_probs));
    return grad;
#else
    fail_not_cuda_build(op);
#endif
  }
  ECH_DISPATCH_FLOATING(log_probs.dtype(), op, {
    cpu::cross_entropy_backward(n, classes, grad_loss.data<scalar_t>(), log_probs.data<scalar_t>(),
                                target.data<int64_t>(), grad.data<scalar_t>());
  });
  return grad;
}

// ---- optim ------------------------------------------------------------------------------------

namespace {

// sgd_step_'s arguments, checked (a bad one is named with its shape).
void check_sgd(const char* op, const Tensor& param, const Tensor& grad_in,
               const Tensor& momentum_buf, const SGDOptions& o, const Tensor& guard,
               const Tensor& lr, const Tensor& ema) {
  check_float_like(op, param, param, "param");
  check_float_like(op, grad_in, param, "grad");
  check_shape(op, grad_in, param.shape(), "grad");
  ECH_CHECK(param.is_contiguous(), op, ": param ", param.describe(),
            " is updated in place and must be contiguous");
  ECH_CHECK(o.lr >= 0 && o.momentum >= 0 && o.weight_decay >= 0, op,
            ": lr, momentum and weight_decay must be non-negative, got lr ", o.lr, ", momentum ",
            o.momentum, ", weight_decay ", o.weight_decay);
  ECH_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), op,
            ": Nesterov momentum requires momentum > 0 and dampening 0");
  const bool has_buffer = o.momentum != 0;
  if (has_buffer) {
    check_float_like(op, momentum_buf, param, "momentum_buf");
    check_shape(op, momentum_buf, param.shape(), "momentum_buf");
    ECH_CHECK(momentum_buf.is_contiguous(), op, ": momentum_buf must be contiguous");
  }
  if (guard.defined()) {
    ECH_CHECK(guard.dtype() == kFloat32 && guard.numel() == 1 && guard.device() == param.device(),
              op, ": guard ", guard.describe(), " must be a float32 scalar on ", param.device());
  }
  if (lr.defined()) {
    ECH_CHECK(lr.dtype() == kFloat64 && lr.numel() == 1 && lr.device() == param.device(), op,
              ": lr ", lr.describe(), " must be a float64 scalar on ", param.device());
  }
  if (ema.defined()) {
    ECH_CHECK(o.ema_decay > 0 && o.ema_decay < 1, op, ": ema_decay must be in (0, 1) with an ema ",
              "tensor, got ", o.ema_decay);
    check_float_like(op, ema, param, "ema");
    check_shape(op, ema, param.shape(), "ema");
    ECH_CHECK(ema.is_contiguous(), op, ": ema must be contiguous");
  }
}

}  // namespace

void sgd_step_(Tensor& param, const Tensor& grad_in, Tensor& momentum_buf, const SGDOptions& o,
               bool first_step, const Tensor& guard, const Tensor& lr, const Tensor& ema) {
  const char* op = "sgd_step_";
  check_sgd(op, param, grad_in, momentum_buf, o, guard, lr, ema);
  const bool has_buffer = o.momentum != 0;
  const float* guard_ptr = guard.defined() ? guard.data<float>() : nullptr;
  const double* lr_ptr = lr.defined() ? lr.data<double>() : nullptr;
  const Tensor grad = grad_in.contiguous();
  const int64_t count = param.numel();
  if (count > 0) {
    if (param.is_cuda()) {
#if ECHELON_WITH_CUDA
      cuda::DeviceGuard guard(param.device().index);
      cuda::sgd_step(count, o, first_step, param.data<float>(), grad.data<float>(),
                     has_buffer ? momentum_buf.data<float>() : nullptr, stream_of(param), guard_ptr,
                     lr_ptr, ema.defined() ? ema.data<float>() : nullptr);
#else
      fail_not_cuda_build(op);
#endif
    } else {
      const bool fast = cpu_kernels() == CpuKernels::Fast;
      ECH_DISPATCH_FLOATING(param.dtype(), op, {
        (fast ? cpu::fast::sgd_step<scalar_t>
              : cpu::sgd_step<scalar_t>)(count, o, first_step, param.data<scalar_t>(),
                                         grad.data<scalar_t>(),
                                         has_buffer ? momentum_buf.data<scalar_t>() : nullptr,
                                         guard_ptr, lr_ptr,
                                         ema.defined() ? ema.data<scalar_t>() : nullptr);
      });
    }
  }
}

void sgd_steps_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_bufs, const SGDOptions& o, bool first_step,
                const Tensor& guard, const Tensor& lr, const std::vector<Tensor>& emas) {
  const char* op = "sgd_steps_";
  ECH_CHECK(grads.size() == params.size() && momentum_bufs.size() == params.size() &&
                (emas.empty() || emas.size() == params.size()),
            op, ": ", params.size(), " parameters but ", grads.size(), " gradients, ",
            momentum_bufs.size(), " momentum buffers and ", emas.size(), " averages");
  const auto ema_of = [&](size_t i) { return emas.empty() ? Tensor() : emas[i]; };
  for (size_t i = 0; i < params.size(); ++i)
    check_sgd(op, params[i], grads[i], momentum_bufs[i], o, guard, lr, ema_of(i));
  const bool one_gpu = !params.empty() && params[0].is_cuda() &&
                       std::all_of(params.begin(), params.end(), [&](const Tensor& p) {
                         return p.device() == params[0].device();
                       });
  if (!one_gpu) {
    for (size_t i = 0; i < params.size(); ++i) {
      Tensor param = params[i], buffer = momentum_bufs[i];
      sgd_step_(param, grads[i], buffer, o, first_step, guard, lr, ema_of(i));
    }
    return;
  }
#if ECHELON_WITH_CUDA
  const bool has_buffer = o.momentum != 0;
  std::vector<Tensor> contiguous;  // the gradients' copies, alive until the launch is enqueued
  std::vector<cuda::SgdTensor> list;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].numel() == 0) continue;
    contiguous.push_back(grads[i].contiguous());
    const Tensor ema = ema_of(i);
    list.push_back({params[i].data<float>(), contiguous.back().data<float>(),
                    has_buffer ? momentum_bufs[i].data<float>() : nullptr,
                    ema.defined() ? ema.data<float>() : nullptr, params[i].numel()});
  }
  cuda::DeviceGuard device(params[0].device().index);
  cuda::sgd_steps(list, o, first_step, stream_of(params[0]),
                  guard.defined() ? guard.data<float>() : nullptr,
                  lr.defined() ? lr.data<double>() : nullptr);
#else
  fail_not_cuda_build(op);
#endif
}

}  // namespace echelon::ops
