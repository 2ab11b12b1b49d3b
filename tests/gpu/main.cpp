// The GPU test binary. Exits 77 (ctest's SKIP_RETURN_CODE) when no CUDA device can be used, so a
// CPU-only machine reports "skipped", not "failed". Besides doctest's options it takes:
//   --parity-list               print the parity cases and exit
//   --parity-perf[=REPEATS]     median time of every parity case on cuda:0 and on the CPU
//   --parity-filter=TEXT        restrict the perf mode to cases whose name contains TEXT
// doctest's listing options (--list-test-suites ...) work without a device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include <cuda_runtime.h>

#include "tests/support/parity.h"

namespace {

int print_perf(int repeats, const std::string& filter) {
  using echelon::parity::PerfRow;
  const auto gpu = echelon::parity::run_perf(echelon::Device::cuda(0), repeats, filter);
  const auto cpu = echelon::parity::run_perf(echelon::Device::cpu(), 3, filter);
  std::printf("%-40s %12s %12s %9s\n", "case", "cuda_us", "cpu_us", "speedup");
  for (const PerfRow& row : gpu) {
    double cpu_us = 0.0;
    for (const PerfRow& c : cpu)
      if (c.name == row.name) cpu_us = c.median_us;
    std::printf("%-40s %12.1f %12.1f %8.1fx\n", row.name.c_str(), row.median_us, cpu_us,
                row.median_us > 0 ? cpu_us / row.median_us : 0.0);
  }
  return 0;
}

// doctest's listing options (--list-test-suites, -lts, --list-test-cases, -ltc, ...): they run
// no test, so they work without a device (tools/gpu-check.sh lists the suites that way).
bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::string bare = arg.rfind("--dt-", 0) == 0 ? "--" + arg.substr(5) : arg;
    if (bare.rfind("--list-", 0) == 0 || bare == "-ltc" || bare == "-lts" || bare == "-lr")
      return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--parity-list") {  // registration needs no device
      std::cout << echelon::parity::list_cases();
      return 0;
    }
  }
  if (only_lists(argc, argv)) {
    doctest::Context context;
    context.applyCommandLine(argc, argv);
    return context.run();
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr, "echelon_gpu_tests: no usable CUDA device (%s): skipped\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  std::string filter;
  int perf_repeats = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--parity-perf", 0) == 0)
      perf_repeats = arg.size() > 14 ? std::stoi(arg.substr(14)) : 21;
    if (arg.rfind("--parity-filter=", 0) == 0) filter = arg.substr(16);
  }
  try {
    if (perf_repeats > 0) return print_perf(perf_repeats, filter);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity perf failed: %s\n", e.what());
    return 1;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
