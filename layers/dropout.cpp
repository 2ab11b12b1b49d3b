#include <echelon/layers/dropout.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>

namespace echelon {

Dropout::Dropout(double p, uint64_t seed) : p_(p), gen_(seed) {
  ECH_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) {
  return dropout(x, p_, is_training(), gen_);
}

std::string Dropout::describe() const {
  return str("Dropout(p=", p_, ")");
}

}  // namespace echelon
