// Checked readers for the environment switches (base/env.h).
#include <echelon/base/env.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

#include <echelon/base/error.h>

namespace echelon::env {

namespace {

// "a", "a or b", "a, b or c".
std::string one_of(const std::vector<std::string_view>& names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  return list;
}

}  // namespace

namespace detail {

bool same_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

void throw_bad_choice(const char* name, std::string_view text,
                      const std::vector<std::string_view>& names) {
  ECH_FAIL(name, "='", text, "': expected ", one_of(names));
}

}  // namespace detail

std::optional<std::string> value(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::string(text);
}

bool parse_flag(const char* name, std::string_view text) {
  return parse_choice<bool>(name, text,
                            {{"1", true},
                             {"0", false},
                             {"true", true},
                             {"false", false},
                             {"on", true},
                             {"off", false},
                             {"yes", true},
                             {"no", false}});
}

int64_t parse_integer(const char* name, std::string_view text, int64_t low, int64_t high) {
  int64_t parsed = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  const bool whole = error == std::errc() && end == text.data() + text.size();
  ECH_CHECK(whole && parsed >= low && parsed <= high, name, "='", text,
            "': expected an integer in [", low, ", ", high, "]");
  return parsed;
}

bool flag(const char* name, bool fallback) {
  const std::optional<std::string> text = value(name);
  return text ? parse_flag(name, *text) : fallback;
}

int64_t integer(const char* name, int64_t fallback, int64_t low, int64_t high) {
  const std::optional<std::string> text = value(name);
  return text ? parse_integer(name, *text, low, high) : fallback;
}

}  // namespace echelon::env
