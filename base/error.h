// One exception type for the whole library. Every failure a user can cause (bad shape, bad file,
// CUDA error) becomes an echelon::Error whose message names the op/file and what was wrong.
// The library never calls abort() or exit().
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace echelon {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
template <typename T>
void put(std::ostream& out, const T& value) {
  out << value;
}
// Shapes print as [2, 3, 4].
inline void put(std::ostream& out, const std::vector<int64_t>& shape) {
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
}
}  // namespace detail

// Concatenates anything streamable (and shapes): str("shape ", shape, " at ", i).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream out;
  (detail::put(out, args), ...);
  return out.str();
}

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace echelon

// ECH_CHECK(cond, "matmul: inner sizes differ: ", a, " vs ", b) throws echelon::Error with
// file:line.
#define ECH_CHECK(cond, ...)                                                                      \
  do {                                                                                            \
    if (!(cond)) ::echelon::detail::throw_error(__FILE__, __LINE__, ::echelon::str(__VA_ARGS__)); \
  } while (0)

#define ECH_FAIL(...) \
  ::echelon::detail::throw_error(__FILE__, __LINE__, ::echelon::str(__VA_ARGS__))
