// Runs the `echelon` binary as a user would (tests/cpu/cli_test.cpp, bench_cli_test.cpp): exit
// status, stdout and stderr, and the one-line usage errors.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace echelon::test {

namespace fs = std::filesystem;

inline const fs::path kBinary = fs::path(ECHELON_BINARY_DIR) / "echelon";

struct Run {
  int status = -1;
  std::string out, err;
};

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `echelon ARGS` with stdout and stderr captured to files; `env` ("NAME=value ") goes first.
inline Run run(const std::string& args, const std::string& env = "") {
  const fs::path dir = temp_dir("io");
  const std::string command = env + kBinary.string() + " " + args + " >" + (dir / "out").string() +
                              " 2>" + (dir / "err").string();
  const int raw = std::system(command.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(dir / "out");
  r.err = slurp(dir / "err");
  return r;
}

inline bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

inline size_t count_lines(const std::string& text) {
  size_t n = 0;
  for (const char c : text) n += c == '\n';
  return n;
}

// One line on stderr, starting "echelon: error: " and containing `needle`; exit status 2.
inline void check_usage_error(const std::string& args, const std::string& needle) {
  CAPTURE(args);
  const Run r = run(args);
  CHECK(r.status == 2);
  CHECK(count_lines(r.err) == 1);
  CHECK(r.err.rfind("echelon: error: ", 0) == 0);
  CHECK_MESSAGE(r.err.find(needle) != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find(".cpp:") == std::string::npos, "source location shown: ", r.err);
}

}  // namespace echelon::test
