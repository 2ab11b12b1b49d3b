// THE parity harness (the ggml test-backend-ops idea): one registry of op cases, each run on
// every backend and compared against the naive CPU twin by |a - b| <= atol + rtol * |ref|.
//
// A case declares its inputs as InputSpecs (shape, layout, dtype, value range) rather than as
// tensors, so that the harness can build the SAME view (transposed, strided, offset, broadcast)
// over fresh random data on each device. `run` is written against tensor/ops.h only.
//
// Modes:
//   run_gpu_parity: inputs drawn on CPU, copied to CUDA, CUDA output vs CPU output (matmul cases
//     run once per CUDA GEMM: ours and cuBLAS).
//   run_cpu_parity: float32 vs float64 twin on upcast inputs (same op, same values), and for
//     matmul and conv cases the naive twin vs the OpenBLAS path.
//   list_cases / run_perf: what is covered; median time per case.
// Every output is also copied into a NaN-filled view of a guarded buffer (check_guarded_copy):
// a short copy leaves NaN, an out-of-bounds write changes a guard.
//
// Other families register their cases from their own file (tests/support/parity_nn.cpp):
//   static const echelon::parity::Registrar nn_cases([] { echelon::parity::add({...}); });
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <echelon/tensor/ops.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parity {

// How an input tensor is laid out in memory (values are random either way).
enum class Layout : uint8_t {
  Contiguous,
  Transposed,  // last two dims stored swapped: a transpose(-2, -1) view (rank >= 2)
  Strided,     // every other element of a buffer twice as long in the last dim
  Offset,      // a narrow() view into the middle of a longer buffer (dim 0 + 2)
  Broadcast,   // `shape` drawn, then expand()ed to `expand_to` (stride 0 on broadcast dims)
};

struct InputSpec {
  Shape shape;
  DType dtype = kFloat32;
  // Floats: uniform in [lo, hi). Integers: uniform in [lo, hi) rounded down. Never all zeros.
  double lo = -1.0, hi = 1.0;
  Layout layout = Layout::Contiguous;
  Shape expand_to;  // Broadcast only
};

struct Tolerance {
  double atol = 1e-5;
  double rtol = 1e-4;
};

using RunFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

struct OpCase {
  OpCase(std::string name, std::string family, std::vector<InputSpec> inputs, RunFn run,
         Tolerance tol = {}, bool has_cuda = true, bool float64_twin = true)
      : name(std::move(name)),
        family(std::move(family)),
        inputs(std::move(inputs)),
        run(std::move(run)),
        tol(tol),
        has_cuda(has_cuda),
        float64_twin(float64_twin) {}

  std::string name;    // "add/broadcast_row": op / variant
  std::string family;  // the kernel file: elementwise, reduce, matmul, ..., conv, pool, norm
  std::vector<InputSpec> inputs;
  RunFn run;
  Tolerance tol;             // CUDA vs CPU, and float32 vs float64 on CPU
  bool has_cuda = true;      // false: CPU-only op (skipped by GPU mode, listed as such)
  bool float64_twin = true;  // false: the op has no float64 version (CPU mode skips it)
};

// Registry. add() throws when a name is registered twice.
void add(OpCase op_case);
const std::vector<OpCase>& cases();
struct Registrar {
  explicit Registrar(const std::function<void()>& register_cases) { register_cases(); }
};

// One comparison. `ok` is false on a size/dtype mismatch, a NaN where the reference has none
// (or the reverse), or any element outside the tolerance.
struct Comparison {
  bool ok = true;
  int64_t count = 0;       // elements compared
  int64_t mismatches = 0;  // elements outside tolerance
  double max_abs_error = 0.0;
  int64_t worst_index = -1;
  double worst_actual = 0.0, worst_expected = 0.0;
  std::string problem;  // why !ok, for the report
  std::string summary() const;
};
Comparison compare(const Tensor& actual, const Tensor& expected, Tolerance tol);

// Random inputs for a case, built on `device` with the spec's layout. Values come from a CPU
// draw seeded by `seed`, so two devices (or dtypes, via `float_dtype`) see identical values.
// float_dtype overrides the dtype of floating-point specs (CPU mode's float64 twin).
std::vector<Tensor> make_inputs(const std::vector<InputSpec>& specs, uint64_t seed, Device device,
                                DType float_dtype = kFloat32);

// A contiguous float32 CPU tensor uniform in [-bound, bound), seeded (make_inputs' draw).
Tensor random_cpu(const Shape& shape, uint64_t seed, double bound = 1.0);
// x (a CPU tensor) with every element rounded as `precision` rounds the GEMMs' operands
// (round_to_tf32 / round_to_bf16 of its float value; fp32: unchanged), in x's dtype and shape
// (contiguous), so a reduced-precision kernel can be held against the twin run on the rounded
// inputs.
Tensor rounded_as(const Tensor& x, Precision precision);

// The convolution cases' uneven window ("s2_p1_d2"): 3x3, stride 2, padding 1, dilation 2.
Conv2dGeometry window_s2_p1_d2();

// A buffer of numel + 2 * guard elements on `device`: NaN in the middle view, a sentinel in
// the guards. check() throws echelon::Error naming `what` when a guard changed.
struct Guarded {
  Tensor buffer;  // 1-D
  Tensor view;    // `shape`, contiguous, over the middle of buffer
  int64_t guard = 0;
  void check(const std::string& what) const;
};
Guarded make_guarded(const Shape& shape, DType dtype, Device device, int64_t guard = 67);
// Copies `out` into a guarded NaN-filled view on its own device and checks that every element
// arrived (no NaN left where `out` has none) and no guard was touched. Empty string: fine.
std::string check_guarded_copy(const Tensor& out);

struct CaseResult {
  std::string name;
  std::string variant;  // "cuda", "cuda/cublas", "cpu/f32-vs-f64", "cpu/naive-vs-fast"
  bool skipped = false;
  bool ok = true;
  std::string detail;  // comparison summary or the exception text
};
// Each runs every registered case (filtered by substring of name or family when non-empty)
// and never throws for a case: an exception becomes a failed CaseResult.
std::vector<CaseResult> run_cpu_parity(const std::string& filter = "");
std::vector<CaseResult> run_gpu_parity(const std::string& filter = "");  // throws without CUDA

struct PerfRow {
  std::string name;
  std::string device;
  double median_us = 0.0;
  int repeats = 0;
};
// Median wall time of `repeats` runs per case on `device` (synchronised on CUDA).
std::vector<PerfRow> run_perf(Device device, int repeats = 21, const std::string& filter = "");

std::string list_cases();  // one line per case: family, name, inputs, tolerance, backends
std::string format_results(const std::vector<CaseResult>& results);  // failures + a count line

}  // namespace echelon::parity
