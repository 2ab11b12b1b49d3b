// Environment switch values (base/env.h): a flag, a bounded integer, a choice among names. Byte 0
// picks the reader (mod 3) and, for the integer, its bounds; the rest is the value as the
// environment delivers it (a C string: it ends at the first NUL). Contract: the value is one the
// reader accepts and the result says what it says, or an echelon::Error that quotes the variable
// and the value.
#include "fuzz_common.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include <echelon/base/env.h>

namespace {

// The bounds byte 0 picks: a narrow range, a range around 0, and all of int64.
constexpr int64_t kBounds[][2] = {{0, 64}, {-1000, 1000}, {INT64_MIN, INT64_MAX}};

bool same_ignoring_case(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace env = echelon::env;
  if (size < 1) return 0;
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  text.resize(std::min(text.size(), text.find('\0')));
  const std::string quoted = "ECHELON_FUZZ='" + text + "': expected";
  fuzz::expect_parse_or_error(quoted, [&] {
    switch (data[0] % 3) {
      case 0: {
        const bool on = env::parse_flag("ECHELON_FUZZ", text);
        const char* const spellings[] = {on ? "1" : "0", on ? "true" : "false", on ? "on" : "off",
                                         on ? "yes" : "no"};
        if (std::none_of(std::begin(spellings), std::end(spellings),
                         [&](const char* s) { return same_ignoring_case(text, s); }))
          fuzz::finding("a flag accepted '" + text + "' or read it the wrong way round");
        break;
      }
      case 1: {
        const auto& bounds = kBounds[(data[0] / 3) % 3];
        const int64_t value = env::parse_integer("ECHELON_FUZZ", text, bounds[0], bounds[1]);
        if (value < bounds[0] || value > bounds[1])
          fuzz::finding("an integer outside its bounds was accepted: " + text);
        const std::string digits = text.substr(!text.empty() && text[0] == '-');
        if (digits.empty() ||
            !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
          fuzz::finding("an integer with other characters was accepted: " + text);
        if ((value < 0) != (text[0] == '-' && value != 0))
          fuzz::finding("an integer's sign was misread: " + text);
        break;
      }
      case 2: {
        const int picked =
            env::parse_choice<int>("ECHELON_FUZZ", text, {{"auto", 0}, {"64", 1}, {"128", 2}});
        const char* const names[] = {"auto", "64", "128"};
        if (!same_ignoring_case(text, names[picked]))
          fuzz::finding("a choice read '" + text + "' as " + names[picked]);
        break;
      }
    }
  });
  return 0;
}
