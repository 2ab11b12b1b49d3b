#include <echelon/base/error.h>

#include <cstring>

namespace echelon {

std::string message_of(const std::exception& e) {
  if (const auto* error = dynamic_cast<const Error*>(&e)) return error->message();
  return e.what();
}

}  // namespace echelon

namespace echelon::detail {

void throw_error(const char* file, int line, const std::string& message) {
  // Only the file's base name: full build paths are noise in a user-facing message.
  const char* slash = std::strrchr(file, '/');
  throw Error(message, str(slash ? slash + 1 : file, ":", line));
}

}  // namespace echelon::detail
