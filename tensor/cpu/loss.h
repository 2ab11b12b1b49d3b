// Loss CPU twins (naive): cross-entropy fused with a stable log-softmax. cuda/kernels/loss.h
// declares the same names for float on a stream.
#pragma once

#include <cstdint>

namespace echelon::cpu {

// logits (N, C), target int64 (N) -> log_probs (N, C) and loss[0] = mean_i -log_probs[i, t_i].
// Returns the first row whose target lies outside [0, C), or -1; on a bad row the outputs are
// unspecified (the caller throws).
template <typename T>
int64_t cross_entropy_forward(int64_t n, int64_t classes, const T* logits, const int64_t* target,
                              T* log_probs, T* loss);
// grad_logits (N, C) = (exp(log_probs) - one_hot(target)) * grad_loss[0] / N.
template <typename T>
void cross_entropy_backward(int64_t n, int64_t classes, const T* grad_loss, const T* log_probs,
                            const int64_t* target, T* grad_logits);

}  // namespace echelon::cpu
