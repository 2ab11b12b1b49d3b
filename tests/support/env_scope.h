// One environment variable set (or, with nullopt, unset) for a scope and restored when the scope
// ends, also when a check throws: `EnvScope stages("ECHELON_MMA_STAGES", "3");`.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

#include <echelon/base/error.h>

namespace echelon::test {

class EnvScope {
 public:
  EnvScope(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  ~EnvScope() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  EnvScope(const EnvScope&) = delete;
  EnvScope& operator=(const EnvScope&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// The user-facing message of what `read` throws ("" when it throws no echelon::Error).
template <typename Read>
std::string error_of(Read read) {
  try {
    read();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace echelon::test
