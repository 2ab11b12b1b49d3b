// The op table behind `echelon bench op` (parallel/op_bench.h): for each op, its family, its
// default input shape and a builder that makes the tensors once and returns one closure per pass.
// Internal to the parallel layer.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <echelon/parallel/op_bench.h>
#include <echelon/tensor/shape.h>
#include <echelon/tensor/tensor.h>

namespace echelon::parallel::detail {

struct BenchPass {
  std::string name;
  std::function<void()> run;
  double flops = 0, bytes = 0;
};

struct BenchCase {
  std::string shapes;  // "input (..) -> output (..)"
  std::vector<BenchPass> passes;
};

struct BenchOpEntry {
  const char* name;
  const char* family;  // "conv" and "matmul" have the naive/fast (ours/vendor) implementations
  Shape default_input;
  BenchCase (*build)(const OpBenchOptions& options, const Shape& input);
  // A fast CPU path besides the twin that needs no BLAS (CpuKernels::Fast: tensor/cpu/fast), so
  // "fast" is offered on CPU; conv and matmul offer it when built with BLAS.
  bool cpu_fast = false;
};

const std::vector<BenchOpEntry>& bench_op_table();

// Shared by the two halves of the table (op_bench_cases.cpp, op_bench_cases_more.cpp).
double bytes_of(std::initializer_list<const Tensor*> tensors);  // their bytes, summed
std::string shapes(const Shape& in, const Shape& out);          // "input [..] -> output [..]"
// Throws naming the op when `input` does not have `rank` sizes (`layout`, e.g. "(N, C, H, W)").
void need_rank(const OpBenchOptions& o, const Shape& input, size_t rank, const char* layout);

}  // namespace echelon::parallel::detail
