// Checked readers for the environment switches (docs/environment.md lists them all). A switch set
// to a value it does not accept throws echelon::Error naming the variable, the value and what is
// accepted (`ECHELON_MMA_STAGES='3': expected 2 or 4`): a typo must not silently run, and
// measure, the default. Unset or empty means the default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace echelon::env {

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> value(const char* name);

// 1/0, true/false, on/off, yes/no, in any case.
bool flag(const char* name, bool fallback);
// A decimal integer (the whole value: digits, an optional '-') within [low, high].
int64_t integer(const char* name, int64_t fallback, int64_t low, int64_t high);

// One of `choices` by name, in any case:
//   choice("ECHELON_MMA_TILE", MmaTile::Auto, {{"auto", Auto}, {"64", Small}, {"128", Large}}).
template <typename T>
struct Named {
  std::string_view name;
  T value;
};
template <typename T>
T choice(const char* name, T fallback, std::initializer_list<Named<T>> choices);

// The parsers behind the readers, for a value read elsewhere (and for tests); `name` is only for
// the message.
bool parse_flag(const char* name, std::string_view text);
int64_t parse_integer(const char* name, std::string_view text, int64_t low, int64_t high);
template <typename T>
T parse_choice(const char* name, std::string_view text, std::initializer_list<Named<T>> choices);

namespace detail {
bool same_ignoring_case(std::string_view a, std::string_view b);
[[noreturn]] void throw_bad_choice(const char* name, std::string_view text,
                                   const std::vector<std::string_view>& names);
}  // namespace detail

template <typename T>
T parse_choice(const char* name, std::string_view text, std::initializer_list<Named<T>> choices) {
  std::vector<std::string_view> names;
  for (const Named<T>& c : choices) {
    if (detail::same_ignoring_case(text, c.name)) return c.value;
    names.push_back(c.name);
  }
  detail::throw_bad_choice(name, text, names);
}

template <typename T>
T choice(const char* name, T fallback, std::initializer_list<Named<T>> choices) {
  const std::optional<std::string> text = value(name);
  return text ? parse_choice(name, *text, choices) : fallback;
}

}  // namespace echelon::env
