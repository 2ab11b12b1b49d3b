// Parity cases of a training step's fused passes (session 33): the linear layer's bias and ReLU
// in place after its GEMM (add_row_bias_, elementwise.cu), its ReLU backward inside the bias
// gradient's column sum (relu_backward_column_sums, reduce.cu), and the sync-free step's
// statistics in one block (step_statistics, reduce.cu).
#include <string>
#include <utility>

#include "tests/support/parity.h"

namespace echelon::parity {
namespace {

using L = Layout;

InputSpec f32(Shape shape, L layout = L::Contiguous, double lo = -1.0, double hi = 1.0) {
  return InputSpec{std::move(shape), kFloat32, lo, hi, layout, {}};
}
InputSpec ints(Shape shape, double lo, double hi) {
  return InputSpec{std::move(shape), kInt64, lo, hi, L::Contiguous, {}};
}

const Registrar step_cases([] {
  // A linear layer's bias (and ReLU) in place; the bias a strided view.
  for (const bool relu : {false, true})
    add({std::string("add_row_bias/") + (relu ? "relu_" : "") + "37x13",
         "elementwise",
         {f32({37, 13}), f32({13}, L::Strided)},
         [relu](const auto& in) {
           Tensor y = in[0].clone();
           ops::add_row_bias_(y, in[1], relu);
           return y;
         }});
  // A linear layer's ReLU backward and bias gradient in one pass: the column kernel's float4 path
  // (120 columns) and scalar path (10, 37), one row chunk and several; masked and sums compared.
  for (const auto& [rows, columns] : {std::pair<int64_t, int64_t>{128, 120}, {3, 10}, {1000, 37}}) {
    add({"relu_backward_column_sums/" + std::to_string(rows) + "x" + std::to_string(columns),
         "reduce",
         {f32({rows, columns}), f32({rows, columns})},
         [](const auto& in) {
           const ops::MaskedColumnSums r = ops::relu_backward_column_sums(in[0], ops::relu(in[1]));
           return ops::concat({r.masked.flatten(), r.sums}, 0);
         },
         Tolerance{1e-4, 1e-4}});
  }
  // step_statistics: ties (relu makes rows of zeros, x in [-4, 1)), NaNs (sqrt of x < 0), targets
  // one past each end of [0, C), 300 rows (past the 8 warps' first pass), a non-finite loss, a
  // guard already NaN.
  // nan_guard: the guard starts NaN (a non-finite loss earlier) and must stay NaN.
  const auto step_stats = [](const Tensor& logits, const Tensor& targets, const Tensor& loss,
                             bool nan_guard = false) {
    Tensor guard = ops::mul(loss, 0.0).reshape({});
    if (nan_guard) guard = ops::sqrt(ops::add(guard, -1.0));
    Tensor correct = Tensor::empty({}, logits.dtype(), logits.device());
    ops::step_statistics(logits, targets, loss.reshape({}), guard, correct);
    const Tensor all_rows = correct.clone();
    ops::step_statistics(logits.slice(0, 0, 7), targets.slice(0, 0, 7), loss.reshape({}), guard,
                         correct);  // the count is written, not added
    return ops::concat({all_rows.reshape({1}), correct.reshape({1}), guard.reshape({1})}, 0);
  };
  add({"step_statistics/ties_300x10",
       "reduce",
       {f32({300, 10}, L::Contiguous, -4.0, 1.0), ints({300}, -1.0, 11.0), f32({1})},
       [step_stats](const auto& in) {
         return step_stats(ops::relu(ops::add(in[0], -0.5)), in[1], in[2], /*nan_guard=*/true);
       },
       Tolerance{0, 0}});
  add({"step_statistics/nan_67x45",
       "reduce",
       {f32({67, 45}, L::Contiguous, -1.0, 3.0), ints({67}, 0.0, 45.0), f32({1})},
       [step_stats](const auto& in) { return step_stats(ops::sqrt(in[0]), in[1], in[2]); },
       Tolerance{0, 0}});
  add({"step_statistics/inf_loss_5x1001",
       "reduce",
       {f32({5, 1001}, L::Transposed), ints({5}, 0.0, 1001.0), f32({1}, L::Contiguous, 0.0, 1.0)},
       [step_stats](const auto& in) {
         return step_stats(in[0], in[1], ops::log(ops::mul(in[2], 0.0)));  // log 0 = -inf
       },
       Tolerance{0, 0}});
});

}  // namespace
}  // namespace echelon::parity
