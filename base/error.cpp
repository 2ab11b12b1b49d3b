#include <echelon/base/error.h>

#include <cstring>

namespace echelon::detail {

void throw_error(const char* file, int line, const std::string& message) {
  // Only the file's base name: full build paths are noise in a user-facing message.
  const char* slash = std::strrchr(file, '/');
  throw Error(str(message, " [", slash ? slash + 1 : file, ":", line, "]"));
}

}  // namespace echelon::detail
