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

// what() is the message followed by the source location " [file.cpp:123]" of the check that threw
// (for bug reports); message() is the message alone (for users).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message), message_(message) {}
  Error(const std::string& message, const std::string& location)
      : std::runtime_error(message + " [" + location + "]"), message_(message) {}
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// The user-facing text of any exception: an Error's message without its source location, else
// what(). Use it when wrapping one error's text into another's.
std::string message_of(const std::exception& e);

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
