#include <echelon/parallel/op_bench_cases.h>

#include <echelon/base/error.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel::detail {

namespace {

// Random float32 values in [-0.5, 0.5) on the benchmark's device (never zeros: no fast paths).
struct Maker {
  Generator gen;
  Device device;
  Tensor operator()(const Shape& shape) {
    return ops::add(ops::rand(shape, gen, kFloat32, device), -0.5);
  }
};

Maker maker(const OpBenchOptions& o) {
  return Maker{Generator(o.seed), o.device};
}

Conv2dGeometry conv_window(const OpBenchOptions& o) {
  Conv2dGeometry g;
  g.kernel_h = g.kernel_w = o.kernel > 0 ? o.kernel : 3;
  g.stride_h = g.stride_w = o.stride > 0 ? o.stride : 1;
  g.pad_h = g.pad_w = o.pad >= 0 ? o.pad : g.kernel_h / 2;
  return g;
}

BenchCase conv2d_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 4, "N,C,H,W");
  Maker make = maker(o);
  const Conv2dGeometry g = conv_window(o);
  const int64_t out_channels = o.out_channels > 0 ? o.out_channels : in[1];
  const Tensor x = make(in), w = make({out_channels, in[1], g.kernel_h, g.kernel_w});
  const Tensor b = make({out_channels});
  const Tensor y = ops::conv2d(x, w, b, g);
  const Tensor gy = make(y.shape());
  const double flops = 2.0 * static_cast<double>(y.numel()) * static_cast<double>(in[1]) *
                       static_cast<double>(g.kernel_h * g.kernel_w);
  BenchCase c{shapes(in, y.shape()), {}};
  c.passes.push_back({"forward", [=] { ops::conv2d(x, w, b, g); }, flops, bytes_of({&x, &w, &y})});
  c.passes.push_back({"backward-data",
                      [=] { ops::conv2d_backward(gy, x, w, false, true, g, false); }, flops,
                      bytes_of({&gy, &w, &x})});
  c.passes.push_back({"backward-weight", [=] { ops::conv2d_backward(gy, x, w, true, false, g); },
                      flops, bytes_of({&gy, &x, &w})});
  return c;
}

// C = A B with A (M, K), B (K, N): the data gradient is dC B^T, the weight gradient A^T dC.
BenchCase matmul_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 2, "M,K");
  Maker make = maker(o);
  const int64_t n = o.n > 0 ? o.n : in[1];
  const Tensor a = make(in), b = make({in[1], n});
  const Tensor c = ops::matmul(a, b);
  const Tensor gc = make(c.shape());
  const double flops = 2.0 * static_cast<double>(in[0] * in[1]) * static_cast<double>(n);
  BenchCase r{shapes(in, c.shape()), {}};
  r.passes.push_back({"forward", [=] { ops::matmul(a, b); }, flops, bytes_of({&a, &b, &c})});
  r.passes.push_back(
      {"backward-data", [=] { ops::matmul(gc, b, false, true); }, flops, bytes_of({&gc, &b, &a})});
  r.passes.push_back({"backward-weight", [=] { ops::matmul(a, gc, true, false); }, flops,
                      bytes_of({&a, &gc, &b})});
  return r;
}

Pool2dGeometry pool_window(const OpBenchOptions& o) {
  Pool2dGeometry g;
  g.kernel_h = g.kernel_w = o.kernel > 0 ? o.kernel : 2;
  g.stride_h = g.stride_w = o.stride > 0 ? o.stride : g.kernel_h;
  g.pad_h = g.pad_w = o.pad >= 0 ? o.pad : 0;
  return g;
}

BenchCase max_pool_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 4, "N,C,H,W");
  Maker make = maker(o);
  const Pool2dGeometry g = pool_window(o);
  const Tensor x = make(in);
  Tensor argmax;
  const Tensor y = ops::max_pool2d(x, g, &argmax);
  const Tensor gy = make(y.shape());
  BenchCase c{shapes(in, y.shape()), {}};
  c.passes.push_back({"forward",
                      [=] {
                        Tensor index;
                        ops::max_pool2d(x, g, &index);
                      },
                      0, bytes_of({&x, &y, &argmax})});
  // Given the window, as the autograd nodes call it (on the GPU: the gather, no memset).
  c.passes.push_back({"backward-data", [=] { ops::max_pool2d_backward(gy, argmax, in, g); }, 0,
                      bytes_of({&gy, &argmax, &x})});
  return c;
}

BenchCase avg_pool_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 4, "N,C,H,W");
  Maker make = maker(o);
  const Pool2dGeometry g = pool_window(o);
  const Tensor x = make(in);
  const Tensor y = ops::avg_pool2d(x, g);
  const Tensor gy = make(y.shape());
  BenchCase c{shapes(in, y.shape()), {}};
  c.passes.push_back({"forward", [=] { ops::avg_pool2d(x, g); }, 0, bytes_of({&x, &y})});
  c.passes.push_back(
      {"backward-data", [=] { ops::avg_pool2d_backward(gy, in, g); }, 0, bytes_of({&gy, &x})});
  return c;
}

BenchCase batch_norm_case(const OpBenchOptions& o, const Shape& in) {
  ECH_CHECK(in.size() == 2 || in.size() == 4, "bench op ", o.op,
            ": input must be N,C or N,C,H,W, got ", in);
  Maker make = maker(o);
  const Tensor x = make(in), gamma = make({in[1]}), beta = make({in[1]});
  Tensor mean = make({in[1]}), var = ops::add(make({in[1]}), 1.0);
  const ops::BatchNormOutput out = ops::batch_norm_train(x, gamma, beta, mean, var, 0.1, 1e-5);
  const Tensor gy = make(in);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back(
      {"forward", [=]() mutable { ops::batch_norm_train(x, gamma, beta, mean, var, 0.1, 1e-5); }, 0,
       bytes_of({&x, &out.out})});
  c.passes.push_back(
      {"backward", [=] { ops::batch_norm_backward(gy, x, gamma, out.save_mean, out.save_invstd); },
       0, bytes_of({&gy, &x, &x})});
  return c;
}

BenchCase lrn_case(const OpBenchOptions& o, const Shape& in) {
  need_rank(o, in, 4, "N,C,H,W");
  Maker make = maker(o);
  const Tensor x = make(in);
  Tensor scale;
  const Tensor y = ops::lrn(x, 5, 1e-4, 0.75, 2.0, &scale);
  const Tensor gy = make(in);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back({"forward",
                      [=] {
                        Tensor s;
                        ops::lrn(x, 5, 1e-4, 0.75, 2.0, &s);
                      },
                      0, bytes_of({&x, &y, &scale})});
  c.passes.push_back({"backward-data",
                      [=] { ops::lrn_backward(gy, x, y, scale, 5, 1e-4, 0.75, 2.0); }, 0,
                      bytes_of({&gy, &x, &y, &scale, &x})});
  return c;
}

template <UnaryOp kOp>
BenchCase unary_case(const OpBenchOptions& o, const Shape& in) {
  Maker make = maker(o);
  const Tensor x = make(in);
  const Tensor y = ops::unary(kOp, x);
  const Tensor gy = make(in);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back({"forward", [=] { ops::unary(kOp, x); }, 0, bytes_of({&x, &y})});
  c.passes.push_back(
      {"backward-data", [=] { ops::unary_backward(kOp, gy, x, y); }, 0, bytes_of({&gy, &x, &y})});
  return c;
}

template <BinaryOp kOp>
BenchCase binary_case(const OpBenchOptions& o, const Shape& in) {
  Maker make = maker(o);
  const Tensor a = make(in), b = make(in);
  const Tensor y = ops::binary(kOp, a, b);
  BenchCase c{shapes(in, in), {}};
  c.passes.push_back({"forward", [=] { ops::binary(kOp, a, b); }, 0, bytes_of({&a, &b, &y})});
  return c;
}

}  // namespace

double bytes_of(std::initializer_list<const Tensor*> tensors) {
  double total = 0;
  for (const Tensor* t : tensors) total += static_cast<double>(t->nbytes());
  return total;
}

std::string shapes(const Shape& in, const Shape& out) {
  return "input " + shape_str(in) + " -> output " + shape_str(out);
}

void need_rank(const OpBenchOptions& o, const Shape& input, size_t rank, const char* layout) {
  ECH_CHECK(input.size() == rank, "bench op ", o.op, ": input must be ", layout, " (", rank,
            " numbers), got ", input);
}

// The rest of the table (softmax, losses, optimizer, reductions, shape, im2col, random).
std::vector<BenchOpEntry> more_bench_ops();

const std::vector<BenchOpEntry>& bench_op_table() {
  static const std::vector<BenchOpEntry> table = [] {
    std::vector<BenchOpEntry> t = {
        {"conv2d", "conv", {8, 16, 32, 32}, conv2d_case},
        {"matmul", "matmul", {256, 256}, matmul_case},
        {"max_pool2d", "pool", {8, 16, 32, 32}, max_pool_case, true},
        {"avg_pool2d", "pool", {8, 16, 32, 32}, avg_pool_case},
        {"batch_norm", "norm", {8, 16, 32, 32}, batch_norm_case, true},
        {"lrn", "norm", {8, 16, 16, 16}, lrn_case},
        {"relu", "elementwise", {1 << 20}, unary_case<UnaryOp::Relu>, true},
        {"tanh", "elementwise", {1 << 20}, unary_case<UnaryOp::Tanh>, true},
        {"sigmoid", "elementwise", {1 << 20}, unary_case<UnaryOp::Sigmoid>, true},
        {"exp", "elementwise", {1 << 20}, unary_case<UnaryOp::Exp>, true},
        {"add", "elementwise", {1 << 20}, binary_case<BinaryOp::Add>, true},
        {"mul", "elementwise", {1 << 20}, binary_case<BinaryOp::Mul>, true},
    };
    for (BenchOpEntry& e : more_bench_ops()) t.push_back(e);
    return t;
  }();
  return table;
}

}  // namespace echelon::parallel::detail
