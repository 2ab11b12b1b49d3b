// `echelon reproduce echo|pipeline [--quick] [--json FILE]`: the two papers' headline
// experiments, their tables beside ours (app/reproduce.h).
#pragma once

#include <ostream>
#include <string>

#include <CLI/CLI.hpp>

#include <echelon/app/reproduce.h>

namespace echelon::app {

struct ReproduceCommand {
  CLI::App* reproduce = nullptr;
  reproduce::ReproduceOptions options;
  bool quick = false;
  std::string size;  // hidden: "smoke" (seconds, for tests) overrides --quick
};

// Registers `reproduce` on `root`; the flags land in `command`.
void add_reproduce_command(CLI::App& root, ReproduceCommand& command);
// After parsing: checks the paper and sets options.size.
void finish_reproduce_command(ReproduceCommand& command);
// Runs it; returns the exit status.
int run_reproduce_command(const ReproduceCommand& command, std::ostream& out);

}  // namespace echelon::app
