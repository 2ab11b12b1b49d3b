// Command-line parsing shared by the experiment drivers (bench/exp_*.cpp): CLI11, so every
// driver has --help and rejects unknown flags, malformed numbers and out-of-range values with one
// line naming the flag, instead of running with a default or printing NaN.
#pragma once

#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

namespace echelon::bench {

// Parses argv into `app`'s options. --help prints the usage and exits 0; a bad argument prints
// "NAME: error: ..." on stderr and exits 2 (as the echelon CLI does).
inline void parse_args_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    std::exit(app.exit(help));
  } catch (const CLI::ParseError& error) {
    std::fprintf(stderr, "%s: error: %s (see --help)\n", app.get_name().c_str(), error.what());
    std::exit(2);
  }
}

}  // namespace echelon::bench
