// Sets the fast CPU path's thread count and kernel choice for a scope and restores both after,
// also when a check throws.
#pragma once

#include <echelon/tensor/cpu/fast/parallel.h>
#include <echelon/tensor/ops.h>

#include "tests/support/setting_scope.h"

namespace echelon::test {

struct FastScope {
  FastScope(int threads, ops::CpuKernels kernels)
      : threads_(cpu::fast::num_threads, cpu::fast::set_num_threads, threads),
        kernels_(ops::cpu_kernels, ops::set_cpu_kernels, kernels) {}
  SettingScope<int> threads_;
  SettingScope<ops::CpuKernels> kernels_;
};

}  // namespace echelon::test
