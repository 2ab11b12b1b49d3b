// The second half of the `bench op` table (op_bench_cases.cpp has the first): softmax, losses,
// the optimizer step, reductions, shape ops, im2col and random numbers.
#include <echelon/base/error.h>
#include <echelon/parallel/op_bench_cases.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel::detail {

namespace {

Tensor random_values(const OpBenchOptions& o, Generator& gen, const Shape& shape) {
  return ops::add(ops::rand(shape, gen, kFloat32, o.device), -0.5);
}

template <bool kLog>
BenchCase softmax_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 2, "N,C");
  Generator gen(o.seed);
  const Tensor x = random_values(o, gen, in), gy = random_values(o, gen, in);
  const Tensor y = kLog ? ops::log_softmax(x, 1) : ops::softmax(x, 1);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back({"forward", [=] { kLog ? ops::log_softmax(x, 1) : ops::softmax(x, 1); }, 0,
                      bytes_of({&x, &y})});
  c.passes.push_back(
      {"backward-data",
       [=] { kLog ? ops::log_softmax_backward(gy, y, 1) : ops::softmax_backward(gy, y, 1); }, 0,
       bytes_of({&gy, &y, &x})});
  return c;
}

BenchCase cross_entropy_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 2, "N,C");
  Generator gen(o.seed);
  const Tensor logits = random_values(o, gen, in);
  std::vector<int64_t> labels(static_cast<size_t>(in[0]));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i) % in[1];
  const Tensor target = Tensor::from_vector(labels, {in[0]}).to(o.device);
  Tensor log_probs;
  const Tensor loss = ops::cross_entropy(logits, target, &log_probs);
  const Tensor grad_loss = ops::add(ops::mul(loss, 0.0), 1.0);
  BenchCase c{shapes(in, loss.shape()), {}};
  c.passes.push_back({"forward",
                      [=] {
                        Tensor lp;
                        ops::cross_entropy(logits, target, &lp);
                      },
                      0, bytes_of({&logits, &target, &log_probs})});
  c.passes.push_back({"backward-data",
                      [=] { ops::cross_entropy_backward(grad_loss, log_probs, target); }, 0,
                      bytes_of({&log_probs, &target, &logits})});
  return c;
}

// One SGD step with momentum 0.9 and weight decay: reads param, grad and the momentum buffer,
// writes param and buffer; "step_ema" also updates a moving average of param (--ema) in the same
// pass: one more read and write.
BenchCase sgd_case(const OpBenchOptions& o, const Shape& in) {
  Generator gen(o.seed);
  const Tensor param = random_values(o, gen, in), grad = random_values(o, gen, in);
  const Tensor buffer = random_values(o, gen, in), average = random_values(o, gen, in);
  SGDOptions sgd;
  sgd.momentum = 0.9;
  sgd.weight_decay = 5e-4;
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back({"step",
                      [=]() mutable {
                        Tensor p = param, b = buffer;
                        ops::sgd_step_(p, grad, b, sgd, false);
                      },
                      0, bytes_of({&param, &param, &grad, &buffer, &buffer})});
  SGDOptions averaged = sgd;
  averaged.ema_decay = 0.99;
  c.passes.push_back({"step_ema",
                      [=]() mutable {
                        Tensor p = param, b = buffer;
                        ops::sgd_step_(p, grad, b, averaged, false, Tensor(), Tensor(), average);
                      },
                      0, bytes_of({&param, &param, &grad, &buffer, &buffer, &average, &average})});
  return c;
}

BenchCase sum_case(const OpBenchOptions& o, const Shape& in) {
  Generator gen(o.seed);
  const Tensor x = random_values(o, gen, in);
  const Tensor y = ops::sum(x);
  BenchCase c{shapes(in, y.shape()), {}};
  c.passes.push_back({"forward", [=] { ops::sum(x); }, 0, bytes_of({&x})});
  return c;
}

BenchCase transpose_case(const OpBenchOptions& o, const Shape& in) {
  ECH_CHECK(in.size() >= 2, "bench op ", o.op, ": input needs at least 2 dims, got ", in);
  Generator gen(o.seed);
  const Tensor x = random_values(o, gen, in);
  const Tensor y = ops::transpose(x, 0, 1);
  BenchCase c{shapes(in, y.shape()), {}};
  c.passes.push_back({"forward", [=] { ops::transpose(x, 0, 1); }, 0, bytes_of({&x, &y})});
  return c;
}

// im2col with conv2d's window (--kernel, --stride, --pad); col2im is its backward.
BenchCase im2col_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 4, "N,C,H,W");
  Generator gen(o.seed);
  Conv2dGeometry g;
  g.kernel_h = g.kernel_w = o.kernel > 0 ? o.kernel : 3;
  g.stride_h = g.stride_w = o.stride > 0 ? o.stride : 1;
  g.pad_h = g.pad_w = o.pad >= 0 ? o.pad : g.kernel_h / 2;
  const Tensor x = random_values(o, gen, in);
  const Tensor cols = ops::im2col(x, g);
  BenchCase c{shapes(in, cols.shape()), {}};
  c.passes.push_back({"forward", [=] { ops::im2col(x, g); }, 0, bytes_of({&x, &cols})});
  c.passes.push_back(
      {"backward-data", [=] { ops::col2im(cols, g, in); }, 0, bytes_of({&cols, &x})});
  return c;
}

BenchCase randn_case(const OpBenchOptions& o, const Shape& in) {
  auto gen = std::make_shared<Generator>(o.seed);
  const Device device = o.device;
  const Tensor y = ops::randn(in, *gen, kFloat32, device);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back(
      {"forward", [=] { ops::randn(in, *gen, kFloat32, device); }, 0, bytes_of({&y})});
  return c;
}

}  // namespace

std::vector<BenchOpEntry> more_bench_ops() {
  return {
      {"softmax", "reduce", {256, 1000}, softmax_case<false>},
      {"log_softmax", "reduce", {256, 1000}, softmax_case<true>},
      {"cross_entropy", "loss", {256, 1000}, cross_entropy_case},
      {"sgd", "optim", {1 << 20}, sgd_case, true},
      {"sum", "reduce", {1 << 20}, sum_case, true},
      {"transpose", "shape", {1024, 1024}, transpose_case},
      {"im2col", "im2col", {8, 16, 32, 32}, im2col_case},
      {"randn", "random", {1 << 20}, randn_case},
  };
}

}  // namespace echelon::parallel::detail
