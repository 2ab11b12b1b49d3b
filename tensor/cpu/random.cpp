// Naive CPU twins of cuda/kernels/random.cu: element i is a pure function of (state, i).
#include <echelon/tensor/cpu/random.h>

#include <utility>

#include <echelon/kernels/philox.h>

namespace echelon::cpu {

template <typename T>
void uniform(T* out, int64_t n, PhiloxState state) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(philox_uniform(state, i));
}

template <typename T>
void normal(T* out, int64_t n, PhiloxState state) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(philox_normal(state, i));
}

template <typename T>
void bernoulli(T* out, int64_t n, double p, PhiloxState state) {
  for (int64_t i = 0; i < n; ++i) out[i] = philox_bernoulli(state, i, p) ? T(1) : T(0);
}

void randperm(int64_t* out, int64_t n, PhiloxState state) {
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    // Modulo bias is below 2^-32 * n: negligible for dataset sizes.
    const int64_t j = philox_word(state, static_cast<uint64_t>(n - 1 - i)) % (i + 1);
    std::swap(out[i], out[j]);
  }
}

template void uniform<float>(float*, int64_t, PhiloxState);
template void uniform<double>(double*, int64_t, PhiloxState);
template void normal<float>(float*, int64_t, PhiloxState);
template void normal<double>(double*, int64_t, PhiloxState);
template void bernoulli<float>(float*, int64_t, double, PhiloxState);
template void bernoulli<double>(double*, int64_t, double, PhiloxState);

}  // namespace echelon::cpu
