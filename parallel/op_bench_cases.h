// The op table behind `echelon bench op` (parallel/op_bench.h): for each op, its family, its
// default input shape and a builder that makes the tensors once and returns one closure per pass.
// Internal to the parallel layer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <echelon/parallel/op_bench.h>
#include <echelon/tensor/shape.h>

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
};

const std::vector<BenchOpEntry>& bench_op_table();

}  // namespace echelon::parallel::detail
