#include <echelon/tensor/device.h>

#include <cctype>

#include <echelon/base/error.h>

#if ECHELON_WITH_CUDA
#include <echelon/cuda/stream.h>
#endif

namespace echelon {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  const std::string prefix = "cuda:";
  if (text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0) {
    const std::string digits = text.substr(prefix.size());
    bool all_digits = digits.size() <= 6;
    for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
    if (all_digits) return cuda(std::stoi(digits));
  }
  ECH_FAIL("Device::parse: cannot parse device '", text, "' (expected cpu, cuda or cuda:N)");
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.to_string();
}

int cuda_device_count() {
#if ECHELON_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_available() {
  return cuda_device_count() > 0;
}

std::future<void> warm_up_device(Device device) {
#if ECHELON_WITH_CUDA
  if (device.is_cuda())
    return std::async(std::launch::async, [index = device.index] { cuda::create_context(index); });
#endif
  std::promise<void> nothing_to_do;
  nothing_to_do.set_value();
  return nothing_to_do.get_future();
}

}  // namespace echelon
