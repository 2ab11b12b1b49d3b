// Finite-difference gradient checking in float64 on the CPU. The output of fn is reduced to a
// scalar with fixed random weights r, L = sum(fn(inputs) * r), so every output element is
// checked; each input element that requires grad is perturbed by +-eps (central differences) and
// compared with the analytic gradient from backward(): |analytic - numeric| <= atol +
// rtol*|numeric|.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon {

struct GradcheckReport {
  bool ok = true;
  double max_abs_error = 0;          // over all checked elements
  int64_t worst_input = -1;          // index into inputs of the worst element
  int64_t worst_element = -1;        // flat index within that input
  double analytic = 0, numeric = 0;  // at the worst element
  int64_t checked = 0;               // number of elements compared
  std::string message;               // human-readable summary (names the worst input/element)
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// inputs: float64 CPU tensors; those with requires_grad are checked, the rest (labels,
// constants) are passed through. fn must be deterministic (seed any Generator inside it).
GradcheckReport gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          double eps = 1e-6, double atol = 1e-5, double rtol = 1e-3);

}  // namespace echelon
