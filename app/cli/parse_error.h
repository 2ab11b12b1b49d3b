// CLI11's parse errors, rewritten for a user: which subcommand, which flag, what it expected, and
// a near flag name for a typo ("--modle" -> did you mean --model?).
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace echelon::app {

// One line (without "echelon: error: ") for `error`, thrown while `root` parsed argv; it ends
// with "(see echelon SUBCOMMAND --help)" for the deepest subcommand named in argv.
std::string explain_parse_error(const CLI::App& root, const CLI::ParseError& error, int argc,
                                const char* const* argv);

// The edit distance (insertions, deletions, substitutions, adjacent swaps) between two words.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace echelon::app
