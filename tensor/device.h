// Where a tensor's bytes live: the host, or CUDA device N.
#pragma once

#include <cstdint>
#include <future>
#include <ostream>
#include <string>

namespace echelon {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu", "cuda:1"
  // Parses "cpu", "cuda", "cuda:N"; throws echelon::Error naming the text otherwise.
  static Device parse(const std::string& text);
};

std::ostream& operator<<(std::ostream& out, const Device& device);

// Number of usable CUDA devices; 0 in a CPU-only build or when the driver/GPU is missing.
int cuda_device_count();
bool cuda_available();

// Starts creating `device`'s CUDA context on a thread of its own (a ready future for the CPU).
// Creating one takes a noticeable part of a short run's start-up (driver, memory mappings), time
// the run can spend reading its data meanwhile. get() waits for it and rethrows its error.
std::future<void> warm_up_device(Device device);

}  // namespace echelon
