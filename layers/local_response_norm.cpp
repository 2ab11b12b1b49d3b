#include <echelon/layers/local_response_norm.h>

#include <echelon/autograd/functions.h>
#include <echelon/base/error.h>

namespace echelon {

LocalResponseNorm::LocalResponseNorm(int64_t size, double alpha, double beta, double k)
    : size_(size), alpha_(alpha), beta_(beta), k_(k) {
  ECH_CHECK(size >= 1 && k > 0, "LocalResponseNorm: invalid size=", size, " k=", k);
}

Tensor LocalResponseNorm::forward(const Tensor& x) {
  ECH_CHECK(x.dim() == 4, describe(), ": expected input (N, C, H, W), got ", x.shape());
  return lrn(x, size_, alpha_, beta_, k_);
}

std::string LocalResponseNorm::describe() const {
  return str("LocalResponseNorm(", size_, ", alpha=", alpha_, ", beta=", beta_, ", k=", k_, ")");
}

}  // namespace echelon
