// Naive CPU twins of cuda/kernels/random.cu. Element i is a pure function of (state, i) through
// the formulas in kernels/philox.h, so both backends fill the same
// values. T is float or double. Outputs are contiguous (n).
#pragma once

#include <cstdint>

#include <echelon/tensor/random.h>

namespace echelon::cpu {

// out[i] = philox_uniform(state, i), in [0, 1). Uses n words.
template <typename T>
void uniform(T* out, int64_t n, PhiloxState state);

// out[i] = philox_normal(state, i) (Box-Muller pairs). Uses n words rounded up to even.
template <typename T>
void normal(T* out, int64_t n, PhiloxState state);

// out[i] = 1 if philox_bernoulli(state, i, p) else 0. Uses n words.
template <typename T>
void bernoulli(T* out, int64_t n, double p, PhiloxState state);

// A uniformly random permutation of [0, n) (Fisher-Yates: for i = n-1 .. 1, swap out[i] with
// out[j], j = philox_word(state, n-1-i) % (i+1)). Uses n-1 words. CPU only.
void randperm(int64_t* out, int64_t n, PhiloxState state);

}  // namespace echelon::cpu
