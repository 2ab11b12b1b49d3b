#include <echelon/parallel/op_bench.h>

#include <algorithm>
#include <sstream>

#include <echelon/base/error.h>
#include <echelon/parallel/op_bench_cases.h>
#include <echelon/tensor/cpu/matmul.h>
#include <echelon/tensor/ops.h>

namespace echelon::parallel {

namespace {

using detail::BenchOpEntry;

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

const BenchOpEntry& find_op(const std::string& op) {
  for (const BenchOpEntry& e : detail::bench_op_table())
    if (op == e.name) return e;
  ECH_FAIL("bench op: unknown op '", op, "' (known: ", join(bench_op_names()), ")");
}

bool has_vendor_impl(const BenchOpEntry& e) {
  const std::string family = e.family;
  return family == "conv" || family == "matmul";
}

bool cudnn_built() {
#if ECHELON_WITH_CUDNN
  return true;
#else
  return false;
#endif
}

// Makes `impl` the implementation that runs (process-wide settings of tensor/ops.h).
void select_impl(const std::string& impl, Device device) {
  if (device.is_cpu()) {
    const bool blas = impl == "fast" && cpu::blas_available();
    ops::set_matmul_impl(blas ? ops::MatmulImpl::Blas : ops::MatmulImpl::Naive);
    ops::set_cpu_kernels(impl == "fast" ? ops::CpuKernels::Fast : ops::CpuKernels::Naive);
    return;
  }
  ops::set_matmul_impl(impl == "cublas" ? ops::MatmulImpl::Blas : ops::MatmulImpl::Ours);
  ops::set_conv_impl(impl == "cudnn" ? ops::ConvImpl::Cudnn : ops::ConvImpl::Ours);
}

// Restores the settings that were in effect before the benchmark, also when it throws.
class ImplSettings {
 public:
  ImplSettings()
      : matmul_(ops::matmul_impl()), conv_(ops::conv_impl()), kernels_(ops::cpu_kernels()) {}
  ~ImplSettings() {
    ops::set_matmul_impl(matmul_);
    ops::set_conv_impl(conv_);
    ops::set_cpu_kernels(kernels_);
  }
  ImplSettings(const ImplSettings&) = delete;
  ImplSettings& operator=(const ImplSettings&) = delete;

 private:
  ops::MatmulImpl matmul_;
  ops::ConvImpl conv_;
  ops::CpuKernels kernels_;
};

std::vector<std::string> chosen_impls(const OpBenchOptions& o) {
  std::vector<std::string> available = op_impls(o.op, o.device);
  if (o.impls.empty()) return available;
  for (const std::string& impl : o.impls)
    ECH_CHECK(std::find(available.begin(), available.end(), impl) != available.end(),
              "bench op: implementation '", impl, "' is not available for ", o.op, " on ", o.device,
              " (available: ", join(available), ")");
  return o.impls;
}

void check_shape(const OpBenchOptions& o, const Shape& input) {
  ECH_CHECK(!input.empty(), "bench op ", o.op, ": input must have at least one dimension");
  int64_t elements = 1;
  for (const int64_t d : input) {
    ECH_CHECK(d >= 1, "bench op ", o.op, ": input dimensions must be >= 1, got ", input);
    ECH_CHECK(!__builtin_mul_overflow(elements, d, &elements) && elements <= (int64_t{1} << 40),
              "bench op ", o.op, ": input ", input, " has more than 2^40 elements");
  }
  const auto at_least = [&](const char* flag, int64_t value, int64_t least) {
    ECH_CHECK(value >= least, "bench op ", o.op, ": ", flag, " must be >= ", least, " (got ", value,
              ")");
  };
  at_least("--out-channels", o.out_channels, 0);
  at_least("--kernel", o.kernel, 0);
  at_least("--stride", o.stride, 0);
  at_least("--pad", o.pad, -1);
  at_least("--n", o.n, 0);
}

// Times every pass of the case for one implementation.
OpImplResult time_impl(const OpBenchOptions& o, const BenchOpEntry& entry, const Shape& input,
                       const std::string& impl, std::string& shapes) {
  select_impl(impl, o.device);
  const detail::BenchCase c = entry.build(o, input);
  shapes = c.shapes;
  OpImplResult result{impl, {}};
  for (const detail::BenchPass& pass : c.passes) {
    OpPassResult r{pass.name, time_repeated(pass.run, o.device, o.warmup, o.repeats), pass.flops,
                   pass.bytes, 1.0};
    result.passes.push_back(r);
  }
  return result;
}

}  // namespace

std::vector<BenchOpInfo> bench_ops() {
  std::vector<BenchOpInfo> ops;
  for (const BenchOpEntry& e : detail::bench_op_table())
    ops.push_back({e.name, e.family, e.default_input});
  return ops;
}

std::vector<std::string> bench_op_names() {
  std::vector<std::string> names;
  for (const BenchOpEntry& e : detail::bench_op_table()) names.emplace_back(e.name);
  return names;
}

std::vector<std::string> op_impls(const std::string& op, Device device) {
  const BenchOpEntry& e = find_op(op);
  if (device.is_cpu()) {
    if (has_vendor_impl(e) ? cpu::blas_available() : e.cpu_fast) return {"naive", "fast"};
    return {"naive"};
  }
  const std::string family = e.family;
  if (family == "matmul") return {"cublas", "ours"};
  if (family == "conv" && cudnn_built()) return {"cudnn", "ours"};
  return {"ours"};
}

void check_op_bench_options(const OpBenchOptions& o) {
  const BenchOpEntry& entry = find_op(o.op);
  check_shape(o, o.input.empty() ? entry.default_input : o.input);
  (void)chosen_impls(o);
}

OpBenchResult run_op_bench(const OpBenchOptions& o) {
  check_op_bench_options(o);
  const BenchOpEntry& entry = find_op(o.op);
  const Shape input = o.input.empty() ? entry.default_input : o.input;
  const std::vector<std::string> impls = chosen_impls(o);
  OpBenchResult result;
  result.op = o.op;
  result.family = entry.family;
  result.input = input;
  result.device = o.device;
  result.threads =
      o.device.is_cpu() ? std::max(1, ops::cpu_threads()) : 0;  // unset: the pool has 1
  result.warmup = o.warmup;
  result.repeats = o.repeats;
  ImplSettings restore;
  for (const std::string& impl : impls)
    result.impls.push_back(time_impl(o, entry, input, impl, result.shapes));
  const OpImplResult& baseline = result.impls.front();
  for (OpImplResult& impl : result.impls)
    for (size_t p = 0; p < impl.passes.size(); ++p) {
      const double base = baseline.passes[p].time.median_s, mine = impl.passes[p].time.median_s;
      impl.passes[p].speedup = mine > 0 ? base / mine : 0;
    }
  return result;
}

json::Value OpBenchResult::to_json() const {
  json::Value list = json::Value::array();
  for (const OpImplResult& impl : impls) {
    json::Value passes = json::Value::array();
    for (const OpPassResult& p : impl.passes)
      passes.push(json::Value::object()
                      .set("pass", p.pass)
                      .set("time", p.time.to_json())
                      .set("flops", p.flops)
                      .set("bytes", p.bytes)
                      .set("gflops_per_s", p.gflops())
                      .set("gbytes_per_s", p.gbytes())
                      .set("speedup_vs_baseline", p.speedup));
    list.push(json::Value::object().set("impl", impl.impl).set("passes", std::move(passes)));
  }
  json::Value input_shape = json::Value::array();
  for (const int64_t d : input) input_shape.push(d);
  return json::Value::object()
      .set("benchmark", "op")
      .set("op", op)
      .set("family", family)
      .set("input", std::move(input_shape))
      .set("shapes", shapes)
      .set("device", device.to_string())
      .set("threads", threads)
      .set("warmup", warmup)
      .set("repeats", repeats)
      .set("baseline", impls.empty() ? std::string() : impls.front().impl)
      .set("impls", std::move(list));
}

}  // namespace echelon::parallel
