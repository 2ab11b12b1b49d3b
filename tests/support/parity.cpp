// The parity harness runner: input construction, comparison, guarded copies and the three
// modes. The cases of the basic op families live in parity_cases.cpp; the NN families register
// theirs from parity_nn.cpp.
#include "tests/support/parity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include <echelon/kernels/bf16.h>
#include <echelon/kernels/tf32.h>
#include <echelon/tensor/cpu/matmul.h>

#if ECHELON_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace echelon::parity {
namespace {

std::vector<OpCase>& registry() {
  static std::vector<OpCase> all;
  return all;
}

// FNV-1a: a seed per case that is the same on every platform and run.
uint64_t seed_of(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (const char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash;
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::Contiguous:
      return "contiguous";
    case Layout::Transposed:
      return "transposed";
    case Layout::Strided:
      return "strided";
    case Layout::Offset:
      return "offset";
    case Layout::Broadcast:
      return "broadcast";
  }
  return "?";
}

// The shape of the buffer that the spec's view is taken from.
Shape base_shape(const InputSpec& spec) {
  Shape base = spec.shape;
  const size_t rank = base.size();
  switch (spec.layout) {
    case Layout::Transposed:
      ECH_CHECK(rank >= 2, "parity: a Transposed input needs rank >= 2, got ", spec.shape);
      std::swap(base[rank - 2], base[rank - 1]);
      break;
    case Layout::Strided:
      ECH_CHECK(rank >= 1, "parity: a Strided input needs rank >= 1");
      base[rank - 1] *= 2;
      break;
    case Layout::Offset:
      ECH_CHECK(rank >= 1, "parity: an Offset input needs rank >= 1");
      base[0] += 2;
      break;
    case Layout::Contiguous:
    case Layout::Broadcast:
      break;
  }
  return base;
}

Tensor apply_layout(const Tensor& base, const InputSpec& spec) {
  switch (spec.layout) {
    case Layout::Transposed:
      return base.transpose(-2, -1);
    case Layout::Strided:
      return base.slice(-1, 0, base.size(-1), 2);
    case Layout::Offset:
      return base.narrow(0, 1, spec.shape[0]);
    case Layout::Broadcast:
      return base.expand(spec.expand_to);
    case Layout::Contiguous:
      break;
  }
  return base;
}

std::vector<double> host_values(const Tensor& t) {
  return t.to(Device::cpu()).to(kFloat64).contiguous().to_vector<double>();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool selected(const OpCase& c, const std::string& filter) {
  return filter.empty() || contains(c.name, filter) || c.family == filter;
}

void synchronize(Device device) {
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    const cudaError_t err = cudaDeviceSynchronize();
    ECH_CHECK(err == cudaSuccess,
              "parity: cudaDeviceSynchronize failed: ", cudaGetErrorString(err));
  }
#else
  (void)device;
#endif
}

// Runs `body`, turning an exception into a failed result.
CaseResult guarded_run(const OpCase& c, const std::string& variant,
                       const std::function<std::string()>& body) {
  CaseResult result{c.name, variant, false, true, ""};
  try {
    result.detail = body();
    result.ok = result.detail.empty() || result.detail.rfind("ok", 0) == 0;
  } catch (const std::exception& e) {
    result.ok = false;
    result.detail = std::string("threw: ") + e.what();
  }
  return result;
}

// "ok ..." when out matches ref and its guarded copy is clean, else the problem.
std::string verdict(const Tensor& out, const Tensor& ref, Tolerance tol) {
  const Comparison cmp = compare(out, ref, tol);
  if (!cmp.ok) return cmp.summary();
  const std::string copy_problem = check_guarded_copy(out);
  if (!copy_problem.empty()) return copy_problem;
  return "ok " + cmp.summary();
}

// Restores the process-wide GEMM choice however the case ends.
// Selects the GEMM and the CPU kernels (naive twins or tensor/cpu/fast) for a scope.
class MatmulImplScope {
 public:
  explicit MatmulImplScope(ops::MatmulImpl impl, ops::CpuKernels kernels = ops::CpuKernels::Naive)
      : previous_(ops::matmul_impl()), previous_kernels_(ops::cpu_kernels()) {
    ops::set_matmul_impl(impl);
    ops::set_cpu_kernels(kernels);
  }
  ~MatmulImplScope() {
    ops::set_matmul_impl(previous_);
    ops::set_cpu_kernels(previous_kernels_);
  }
  MatmulImplScope(const MatmulImplScope&) = delete;
  MatmulImplScope& operator=(const MatmulImplScope&) = delete;

 private:
  ops::MatmulImpl previous_;
  ops::CpuKernels previous_kernels_;
};

// Families with a fast CPU path (tensor/cpu/fast) beside the naive twin.
bool has_fast_cpu_path(const std::string& family) {
  return family == "matmul" || family == "conv" || family == "elementwise" || family == "pool" ||
         family == "norm";
}

}  // namespace

void add(OpCase op_case) {
  ECH_CHECK(!op_case.name.empty() && op_case.run, "parity::add: a case needs a name and a run");
  for (const OpCase& c : registry())
    ECH_CHECK(c.name != op_case.name, "parity::add: case '", op_case.name, "' registered twice");
  registry().push_back(std::move(op_case));
}

const std::vector<OpCase>& cases() {
  return registry();
}

std::string Comparison::summary() const {
  std::ostringstream out;
  if (!problem.empty()) out << problem << "; ";
  out << count << " elements, " << mismatches << " outside tolerance, max |err| " << max_abs_error;
  if (worst_index >= 0)
    out << " at " << worst_index << " (got " << worst_actual << ", want " << worst_expected << ")";
  return out.str();
}

Tensor random_cpu(const Shape& shape, uint64_t seed, double bound) {
  return make_inputs({{shape, kFloat32, -bound, bound, Layout::Contiguous, {}}}, seed,
                     Device::cpu())[0];
}

Tensor rounded_as(const Tensor& x, Precision precision) {
  std::vector<double> values = x.to_vector<double>();
  for (double& v : values) {
    const float f = static_cast<float>(v);
    v = precision == Precision::Tf32   ? round_to_tf32(f)
        : precision == Precision::Bf16 ? round_to_bf16(f)
                                       : v;
  }
  return Tensor::from_vector(values, x.shape()).to(x.dtype());
}

Conv2dGeometry window_s2_p1_d2() {
  Conv2dGeometry g;
  g.kernel_h = g.kernel_w = 3;
  g.stride_h = g.stride_w = 2;
  g.pad_h = g.pad_w = 1;
  g.dilation_h = g.dilation_w = 2;
  return g;
}

Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  Comparison cmp;
  if (actual.shape() != expected.shape()) {
    cmp.ok = false;
    cmp.problem = str("shape ", actual.shape(), " vs expected ", expected.shape());
    return cmp;
  }
  const std::vector<double> a = host_values(actual), e = host_values(expected);
  cmp.count = static_cast<int64_t>(a.size());
  double worst_excess = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool a_nan = std::isnan(a[i]), e_nan = std::isnan(e[i]);
    double err = 0.0;
    bool bad = false;
    if (a_nan || e_nan) {
      bad = a_nan != e_nan;
      err = bad ? std::numeric_limits<double>::infinity() : 0.0;
    } else if (std::isinf(a[i]) || std::isinf(e[i])) {
      bad = a[i] != e[i];
      err = bad ? std::numeric_limits<double>::infinity() : 0.0;
    } else {
      err = std::abs(a[i] - e[i]);
      bad = err > tol.atol + tol.rtol * std::abs(e[i]);
    }
    cmp.max_abs_error = std::max(cmp.max_abs_error, err);
    const double excess = err - (tol.atol + tol.rtol * std::abs(e[i]));
    if (bad) ++cmp.mismatches;
    if (excess > worst_excess || (bad && cmp.worst_index < 0)) {
      worst_excess = excess;
      cmp.worst_index = static_cast<int64_t>(i);
      cmp.worst_actual = a[i];
      cmp.worst_expected = e[i];
    }
  }
  cmp.ok = cmp.mismatches == 0;
  return cmp;
}

std::vector<Tensor> make_inputs(const std::vector<InputSpec>& specs, uint64_t seed, Device device,
                                DType float_dtype) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> inputs;
  for (const InputSpec& spec : specs) {
    const Shape base = base_shape(spec);
    std::vector<double> values(static_cast<size_t>(shape_numel(base)));
    std::uniform_real_distribution<double> uniform(spec.lo, spec.hi);
    for (double& v : values) {
      v = uniform(rng);
      // Floats are rounded to float32 first so the float32 and float64 twins see equal values.
      v = is_floating(spec.dtype) ? static_cast<double>(static_cast<float>(v)) : std::floor(v);
    }
    const DType dtype = is_floating(spec.dtype) ? float_dtype : spec.dtype;
    const Tensor host = Tensor::from_vector<double>(values, base).to(dtype);
    inputs.push_back(apply_layout(device.is_cpu() ? host : host.to(device), spec));
  }
  return inputs;
}

Guarded make_guarded(const Shape& shape, DType dtype, Device device, int64_t guard) {
  const int64_t numel = shape_numel(shape);
  Guarded g;
  g.guard = guard;
  g.buffer = Tensor::empty({numel + 2 * guard}, dtype, device);
  Tensor head = g.buffer.narrow(0, 0, guard), tail = g.buffer.narrow(0, guard + numel, guard);
  Tensor middle = g.buffer.narrow(0, guard, numel);
  ops::fill_(head, 123.0);
  ops::fill_(tail, 123.0);
  ops::fill_(middle, is_floating(dtype) ? std::numeric_limits<double>::quiet_NaN() : 77.0);
  g.view = make_view(g.buffer, shape, contiguous_strides(shape), guard);
  return g;
}

void Guarded::check(const std::string& what) const {
  const std::vector<double> values = host_values(buffer);
  const int64_t n = static_cast<int64_t>(values.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i >= guard && i < n - guard) continue;
    ECH_CHECK(values[i] == 123.0, what, ": wrote outside its output: guard element ",
              i < guard ? i - guard : i - (n - guard), " (relative to the view's ",
              i < guard ? "start" : "end", ") is ", values[i], " on ", buffer.device().to_string());
  }
}

std::string check_guarded_copy(const Tensor& out) {
  Guarded g = make_guarded(out.shape(), out.dtype(), out.device());
  ops::copy_(g.view, out);
  g.check("copy_ of the output");
  const Comparison cmp = compare(g.view, out, Tolerance{0.0, 0.0});
  if (!cmp.ok) return "guarded copy differs (NaN left?): " + cmp.summary();
  return "";
}

std::vector<CaseResult> run_cpu_parity(const std::string& filter) {
  std::vector<CaseResult> results;
  for (const OpCase& c : cases()) {
    if (!selected(c, filter)) continue;
    const uint64_t seed = seed_of(c.name);
    if (c.float64_twin) {
      results.push_back(guarded_run(c, "cpu/f32-vs-f64", [&] {
        MatmulImplScope naive(ops::MatmulImpl::Naive);
        const Tensor out32 = c.run(make_inputs(c.inputs, seed, Device::cpu(), kFloat32));
        const Tensor out64 = c.run(make_inputs(c.inputs, seed, Device::cpu(), kFloat64));
        return verdict(out32, out64, c.tol);
      }));
    } else {
      results.push_back(guarded_run(c, "cpu/run", [&] {
        const Tensor out = c.run(make_inputs(c.inputs, seed, Device::cpu()));
        return check_guarded_copy(out);
      }));
    }
    // The fast CPU path (OpenBLAS GEMMs, tensor/cpu/fast) against the naive twin.
    if (has_fast_cpu_path(c.family)) {
      const bool needs_blas = c.family == "matmul" || c.family == "conv";
      if (needs_blas && !cpu::blas_available()) {
        results.push_back({c.name, "cpu/naive-vs-fast", true, true, "built without OpenBLAS"});
        continue;
      }
      results.push_back(guarded_run(c, "cpu/naive-vs-fast", [&] {
        const std::vector<Tensor> inputs = make_inputs(c.inputs, seed, Device::cpu());
        Tensor naive, fast;
        {
          MatmulImplScope scope(ops::MatmulImpl::Naive);
          naive = c.run(inputs);
        }
        {
          MatmulImplScope scope(needs_blas ? ops::MatmulImpl::Blas : ops::MatmulImpl::Auto,
                                ops::CpuKernels::Fast);
          fast = c.run(inputs);
        }
        return verdict(fast, naive, c.tol);
      }));
    }
  }
  return results;
}

std::vector<CaseResult> run_gpu_parity(const std::string& filter) {
  ECH_CHECK(cuda_device_count() > 0, "parity: GPU mode needs a CUDA device");
  std::vector<CaseResult> results;
  for (const OpCase& c : cases()) {
    if (!selected(c, filter)) continue;
    if (!c.has_cuda) {
      results.push_back({c.name, "cuda", true, true, "CPU-only op"});
      continue;
    }
    const uint64_t seed = seed_of(c.name);
    const bool two_gemms = c.family == "matmul";
    const std::vector<std::pair<std::string, ops::MatmulImpl>> variants =
        two_gemms
            ? std::vector<std::pair<std::string, ops::MatmulImpl>>{{"cuda/ours",
                                                                    ops::MatmulImpl::Ours},
                                                                   {"cuda/cublas",
                                                                    ops::MatmulImpl::Blas}}
            // The bf16 family checks our tensor-core GEMMs: under Auto, ops::matmul would call
            // cuBLAS, whose FAST_16BF rounding is not the twin's (seen on the H200, session 22;
            // bf16_gpu_test.cpp bounds cuBLAS at bf16 accuracy instead).
            : std::vector<std::pair<std::string, ops::MatmulImpl>>{
                  {"cuda", c.family == "bf16" ? ops::MatmulImpl::Ours : ops::MatmulImpl::Auto}};
    for (const auto& each : variants) {  // not a structured binding: the lambda captures impl
      const std::string& variant = each.first;
      const ops::MatmulImpl impl = each.second;
      results.push_back(guarded_run(c, variant, [&] {
        Tensor ref;
        {
          MatmulImplScope naive(ops::MatmulImpl::Naive);
          ref = c.run(make_inputs(c.inputs, seed, Device::cpu()));
        }
        MatmulImplScope scope(impl);
        const Tensor out = c.run(make_inputs(c.inputs, seed, Device::cuda(0)));
        ECH_CHECK(out.is_cuda(), c.name, ": the CUDA run returned a tensor on ",
                  out.device().to_string());
        return verdict(out, ref, c.tol);
      }));
    }
  }
  return results;
}

std::vector<PerfRow> run_perf(Device device, int repeats, const std::string& filter) {
  std::vector<PerfRow> rows;
  for (const OpCase& c : cases()) {
    if (!selected(c, filter) || (device.is_cuda() && !c.has_cuda)) continue;
    const std::vector<Tensor> inputs = make_inputs(c.inputs, seed_of(c.name), device);
    c.run(inputs);  // warm-up: allocator cache, cuBLAS handle, lazy module loading
    synchronize(device);
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      c.run(inputs);
      synchronize(device);
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(times.begin(), times.begin() + repeats / 2, times.end());
    rows.push_back({c.name, device.to_string(), times[repeats / 2], repeats});
  }
  return rows;
}

std::string list_cases() {
  std::ostringstream out;
  for (const OpCase& c : cases()) {
    out << c.family << "  " << c.name << "  inputs:";
    for (const InputSpec& s : c.inputs) {
      out << ' ' << dtype_name(s.dtype) << shape_str(s.shape);
      if (s.layout != Layout::Contiguous) out << '/' << layout_name(s.layout);
      if (s.layout == Layout::Broadcast) out << "->" << shape_str(s.expand_to);
    }
    out << "  tol: atol " << c.tol.atol << " rtol " << c.tol.rtol << "  backends: cpu"
        << (c.has_cuda ? " cuda" : "") << (c.float64_twin ? " (f64 twin)" : "") << '\n';
  }
  return out.str();
}

std::string format_results(const std::vector<CaseResult>& results) {
  std::ostringstream out;
  int passed = 0, failed = 0, skipped = 0;
  for (const CaseResult& r : results) {
    if (r.skipped) {
      ++skipped;
    } else if (r.ok) {
      ++passed;
    } else {
      ++failed;
      out << "FAIL " << r.name << " [" << r.variant << "]: " << r.detail << '\n';
    }
  }
  out << passed << " passed, " << failed << " failed, " << skipped << " skipped\n";
  return out.str();
}

}  // namespace echelon::parity
