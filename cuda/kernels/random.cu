// Philox random fills. Element i is a pure function of (state, i) through the formulas shared
// with the CPU twin (kernels/philox.h), so CUDA and CPU produce the same
// uniforms and Bernoulli masks bit for bit, and normals equal up to the final rounding, no matter
// how the grid is shaped. One thread per element; no state lives on the device.
#include <echelon/cuda/kernels/random.h>

#include <cstdint>

#include <echelon/cuda/launch.h>

namespace echelon::cuda {
namespace {

// ---- kernels -----------------------------------------------------------------------------------

template <typename T>
__global__ void uniform_kernel(T* out, int64_t n, PhiloxState state) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = static_cast<T>(philox_uniform(state, static_cast<uint64_t>(i)));
}

template <typename T>
__global__ void normal_kernel(T* out, int64_t n, PhiloxState state) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = static_cast<T>(philox_normal(state, static_cast<uint64_t>(i)));
}

template <typename T>
__global__ void bernoulli_kernel(T* out, int64_t n, double p, PhiloxState state) {
  for (int64_t i = grid_start(); i < n; i += grid_step())
    out[i] = philox_bernoulli(state, static_cast<uint64_t>(i), p) ? T(1) : T(0);
}

}  // namespace

// ---- launchers ---------------------------------------------------------------------------------

template <typename T>
void uniform(T* out, int64_t n, PhiloxState state, cudaStream_t stream) {
  launch_1d("uniform", n, stream, uniform_kernel<T>, out, n, state);
}

template <typename T>
void normal(T* out, int64_t n, PhiloxState state, cudaStream_t stream) {
  launch_1d("normal", n, stream, normal_kernel<T>, out, n, state);
}

template <typename T>
void bernoulli(T* out, int64_t n, double p, PhiloxState state, cudaStream_t stream) {
  launch_1d("bernoulli", n, stream, bernoulli_kernel<T>, out, n, p, state);
}

template void uniform<float>(float*, int64_t, PhiloxState, cudaStream_t);
template void normal<float>(float*, int64_t, PhiloxState, cudaStream_t);
template void bernoulli<float>(float*, int64_t, double, PhiloxState, cudaStream_t);

}  // namespace echelon::cuda
