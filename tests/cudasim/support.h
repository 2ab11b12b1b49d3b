// Helpers of the emulator's self-tests: device buffers, synchronisation, and capturing the sticky
// error a failing launch leaves.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include <echelon/cuda/check.h>
#include <echelon/cuda/launch.h>
#include <echelon/cuda/sim/sim.h>

namespace cudasim_test {

// A device buffer of n T's, NaN/0xFF-filled as cudaMalloc leaves it.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    ECH_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
  }
  DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(values.size()) {
    ECH_CUDA_CHECK(cudaMemcpy(ptr_, values.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    ECH_CUDA_CHECK(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  size_t n_;
  T* ptr_ = nullptr;
};

// Sets the thread/block order for a scope.
class OrderScope {
 public:
  explicit OrderScope(echelon::cudasim::Order order) : previous_(echelon::cudasim::order()) {
    echelon::cudasim::set_order(order);
  }
  ~OrderScope() { echelon::cudasim::set_order(previous_); }
  OrderScope(const OrderScope&) = delete;
  OrderScope& operator=(const OrderScope&) = delete;

 private:
  echelon::cudasim::Order previous_;
};

inline const echelon::cudasim::Order kOrders[] = {
    {echelon::cudasim::OrderKind::Forward, 0},
    {echelon::cudasim::OrderKind::Reverse, 0},
    {echelon::cudasim::OrderKind::Random, 1},
    {echelon::cudasim::OrderKind::Random, 2},
};

// Runs `launch`, waits for the device, and returns the sticky error's message (clearing it), or
// "" when nothing failed.
template <typename F>
std::string failure_of(F launch) {
  launch();
  cudaDeviceSynchronize();
  const std::string message = echelon::cudasim::sticky_message();
  echelon::cudasim::clear_sticky_error();
  return message;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace cudasim_test
