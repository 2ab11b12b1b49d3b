// `echelon bench op`: times one op of tensor/ops.h on one device, implementation beside
// implementation, pass by pass (forward, backward-data, backward-weight, ...), with warm-up, the
// median and spread of repeated rounds, the achieved GFLOP/s (compute-bound ops) or GB/s
// (memory-bound ops), and each implementation's speedup over the first one, the baseline, measured
// in the same run.
//
// Implementations: on CPU "naive" (the twin) and "fast" (tensor/cpu/fast) for the ops that have a
// fast path: conv2d and matmul (they need a BLAS build), max_pool2d, batch_norm, the elementwise
// ops, sum and sgd; on CUDA "ours" and, for conv2d / matmul, "cudnn" / "cublas".
// GB/s counts every tensor an op reads or writes once: a lower bound on the memory traffic.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/base/json.h>
#include <echelon/parallel/timing.h>
#include <echelon/tensor/device.h>

namespace echelon::parallel {

struct OpBenchOptions {
  std::string op;              // one of bench_op_names()
  std::vector<int64_t> input;  // the op's input shape; empty: the op's default
  int64_t out_channels = 0;    // conv2d: filters (0: as many as input channels)
  int64_t kernel = 0;          // conv2d / pooling / im2col window (0: 3 for conv, 2 for pooling)
  int64_t stride = 0;          // 0: 1 for conv, the kernel for pooling
  int64_t pad = -1;            // -1: kernel / 2 for conv, 0 for pooling
  int64_t n = 0;               // matmul: columns of the right-hand (K, N) matrix (0: N = K)
  std::vector<std::string> impls;  // empty: every implementation on the device; first = baseline
  Device device = Device::cpu();
  int warmup = 2;
  int repeats = 10;
  uint64_t seed = 0;
};

struct OpPassResult {
  std::string pass;  // "forward", "backward-data", "backward-weight", "backward", "step"
  TimingStats time;
  double flops = 0;    // floating-point operations of one round (0: memory-bound op)
  double bytes = 0;    // bytes read + written in one round (every tensor once)
  double speedup = 1;  // baseline median / this median, for the same pass
  double gflops() const { return time.median_s > 0 ? flops / time.median_s / 1e9 : 0; }
  double gbytes() const { return time.median_s > 0 ? bytes / time.median_s / 1e9 : 0; }
};

struct OpImplResult {
  std::string impl;
  std::vector<OpPassResult> passes;
};

struct OpBenchResult {
  std::string op, family;
  std::vector<int64_t> input;  // the input shape used (the default when none was given)
  std::string shapes;          // "input [8, 16, 32, 32] -> output [8, 32, 32, 32]" and the like
  Device device = Device::cpu();
  int threads = 0;  // BLAS threads in effect (0: library default)
  int warmup = 0, repeats = 0;
  std::vector<OpImplResult> impls;  // impls[0] is the baseline
  json::Value to_json() const;
};

// The ops the benchmark knows, with their families ("conv", "matmul", "pool", ...) and default
// input shapes.
struct BenchOpInfo {
  std::string name, family;
  std::vector<int64_t> default_input;
};
std::vector<BenchOpInfo> bench_ops();
std::vector<std::string> bench_op_names();
// The implementations of `op` on `device`, baseline first. Unknown ops throw, listing the names.
std::vector<std::string> op_impls(const std::string& op, Device device);
// Checks what `echelon bench op` was given, before anything is allocated: the op exists, the input
// shape (or the op's default) has dimensions >= 1 and at most 2^40 elements, the window options
// are in range and the implementations exist on the device. Throws echelon::Error naming the op
// and the accepted values. run_op_bench calls it first (the fuzz target tests/fuzz/cli.cpp too).
void check_op_bench_options(const OpBenchOptions& options);
// Runs the benchmark. Bad shapes, unknown ops or implementations throw echelon::Error naming the
// option (input, impl, ...) and the accepted values.
OpBenchResult run_op_bench(const OpBenchOptions& options);

}  // namespace echelon::parallel
