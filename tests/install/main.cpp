// Uses the installed library the way a user program would: a tensor op and a zoo model's
// forward. Prints "install check: ok" and exits 0 when everything agrees.
#include <cstdio>

#include <echelon/echelon.h>

int main() {
  using namespace echelon;
  const Tensor a = Tensor::full({2, 3}, 2.0f);
  const Tensor b = Tensor::full({3, 2}, 0.5f);
  const Tensor c = ops::matmul(a, b);  // (2, 2), every element 3 * 2 * 0.5 = 3
  const float total = ops::sum(c).item<float>();
  if (total != 12.0f) {
    std::printf("install check: matmul sums to %f, expected 12\n", total);
    return 1;
  }
  auto model = make_model("lenet5", 1, 10, /*seed=*/1, 28);
  const Tensor logits = model->forward(Tensor::zeros({2, 1, 28, 28}));  // (2, 10)
  if (logits.size(0) != 2 || logits.size(1) != 10) {
    std::printf("install check: lenet5 logits %s\n", logits.describe().c_str());
    return 1;
  }
  std::printf("install check: ok (%lld parameters)\n",
              static_cast<long long>(model->num_parameters()));
  return 0;
}
