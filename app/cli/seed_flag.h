// `--seed N` of train and bench: a whole number in [0, 2^63).
#pragma once

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>

#include <CLI/CLI.hpp>

#include <echelon/base/error.h>

namespace echelon::app {

// --seed: CLI11 reads "-1" as 2^64 - 1 and saturates 1e30 to it, without a word. A seed is a
// whole number that config.json can hold (an int64).
inline CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (text.empty() || error != std::errc() || end != text.data() + text.size() ||
            value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          return str("must be a whole number in 0..", std::numeric_limits<int64_t>::max(),
                     ", got '", text, "'");
        return {};
      },
      "");  // no description: --help keeps "--seed UINT=0"
}

}  // namespace echelon::app
