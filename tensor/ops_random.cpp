// Dispatch for the random family. Each op reserves its counters from the generator first, so the
// same generator state gives the same numbers on every backend.
#include <echelon/tensor/cpu/random.h>
#include <echelon/tensor/ops.h>
#include <echelon/tensor/ops_common.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/kernels/random.h>
#endif

namespace echelon::ops {
namespace {

void check_random_dtype(const char* op, DType dtype) {
  ECH_CHECK(is_floating(dtype), op, ": dtype must be float32 or float64, got ", dtype_name(dtype));
}

}  // namespace

Tensor rand(const Shape& shape, Generator& gen, DType dtype, Device device) {
  check_random_dtype("rand", dtype);
  Tensor out = Tensor::empty(shape, dtype, device);
  const int64_t n = out.numel();
  const PhiloxState state = gen.reserve(static_cast<uint64_t>(n));
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    detail::check_cuda_float("rand", out);
    cuda::DeviceGuard guard(device.index);
    cuda::uniform<float>(out.data<float>(), n, state, cuda::current_stream(device.index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(dtype, "rand", cpu::uniform<scalar_t>(out.data<scalar_t>(), n, state));
  return out;
}

Tensor randn(const Shape& shape, Generator& gen, DType dtype, Device device) {
  check_random_dtype("randn", dtype);
  Tensor out = Tensor::empty(shape, dtype, device);
  const int64_t n = out.numel();
  // Box-Muller pairs consume an even number of words.
  const PhiloxState state = gen.reserve(static_cast<uint64_t>(n + (n & 1)));
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    detail::check_cuda_float("randn", out);
    cuda::DeviceGuard guard(device.index);
    cuda::normal<float>(out.data<float>(), n, state, cuda::current_stream(device.index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(dtype, "randn", cpu::normal<scalar_t>(out.data<scalar_t>(), n, state));
  return out;
}

Tensor bernoulli(const Shape& shape, double p, Generator& gen, DType dtype, Device device) {
  check_random_dtype("bernoulli", dtype);
  ECH_CHECK(p >= 0.0 && p <= 1.0, "bernoulli: probability p must be in [0, 1], got ", p);
  Tensor out = Tensor::empty(shape, dtype, device);
  const int64_t n = out.numel();
  const PhiloxState state = gen.reserve(static_cast<uint64_t>(n));
#if ECHELON_WITH_CUDA
  if (device.is_cuda()) {
    detail::check_cuda_float("bernoulli", out);
    cuda::DeviceGuard guard(device.index);
    cuda::bernoulli<float>(out.data<float>(), n, p, state, cuda::current_stream(device.index));
    return out;
  }
#endif
  ECH_DISPATCH_FLOATING(dtype, "bernoulli",
                        cpu::bernoulli<scalar_t>(out.data<scalar_t>(), n, p, state));
  return out;
}

Tensor randperm(int64_t n, Generator& gen) {
  ECH_CHECK(n >= 0, "randperm: n must be >= 0, got ", n);
  Tensor out = Tensor::empty({n}, kInt64);
  const PhiloxState state = gen.reserve(static_cast<uint64_t>(n > 0 ? n - 1 : 0));
  cpu::randperm(out.data<int64_t>(), n, state);
  return out;
}

}  // namespace echelon::ops
