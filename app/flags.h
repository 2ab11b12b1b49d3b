// Library errors say what was wrong with a value ("partition points '2,,5': empty entry"); they
// never name the command-line flag it came from. The app layer adds the flag, so a user reads
// "--ppv: partition points '2,,5': empty entry" and the library stays usable without a CLI.
#pragma once

#include <string_view>

#include <echelon/base/error.h>

namespace echelon::app {

// Runs `parse` (a library call on one flag's value); an echelon::Error it throws is rethrown with
// the flag's name in front.
template <class Parse>
decltype(auto) parse_flag(std::string_view flag, Parse&& parse) {
  try {
    return parse();
  } catch (const Error& e) {
    ECH_FAIL(flag, ": ", e.message());
  }
}

}  // namespace echelon::app
