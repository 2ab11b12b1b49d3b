// The fast CPU SGD update: cpu::sgd_step's arithmetic (each element in double, the same
// operations in the same order, no fused multiply-adds), with the options' branches taken once
// per call instead of per element, loops the compiler vectorises (AVX-512 where the CPU has it:
// 8 doubles per instruction, against SSE2's 2 in the twin), and long parameters split across the
// thread pool. Bit-identical to the twin (tests/cpu/fast_optim_test.cpp).
#pragma once

#include <cstdint>

#include <echelon/kernels/sgd.h>

namespace echelon::cpu::fast {

// Whether the AVX-512 build of the loops runs (by default where the CPU has AVX-512F); tests
// switch it off to check the portable build too. set_sgd_avx512(true) throws without AVX-512F.
bool sgd_avx512_available();
void set_sgd_avx512(bool on);
bool sgd_avx512();

// As cpu::sgd_step: param, grad, momentum_buf (count); momentum_buf may be null when
// o.momentum == 0; nothing is updated while *guard (when not null) is not finite; *lr (when not
// null) replaces o.lr; ema (when not null) is the parameter's moving average (o.ema_decay).
template <typename T>
void sgd_step(int64_t count, const SGDOptions& o, bool first_step, T* param, const T* grad,
              T* momentum_buf, const float* guard = nullptr, const double* lr = nullptr,
              T* ema = nullptr);

}  // namespace echelon::cpu::fast
