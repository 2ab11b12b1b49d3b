// The `echelon` command line (app/cli/command.cpp, what main() runs): argv is the input split at
// newlines (argv[0] = "echelon"), then validate() for `train`, as train() does first. Errors must
// be one line (the CLI prints "echelon: error: <message>").
#include "fuzz_common.h"

#include <algorithm>

#include <echelon/app/cli/command.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace app = echelon::app;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args = {"echelon"};
  size_t start = 0;
  while (start < text.size() && args.size() < 32) {
    const size_t end = std::min(text.find('\n', start), text.size());
    args.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  // A flag may name files: keep them inside the scratch folder, never the user's run folders.
  for (std::string& a : args)
    if (a.find('/') != std::string::npos) a = fuzz::scratch_dir().string();
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    const app::Command command =
        app::parse_command_line(static_cast<int>(argv.size()), argv.data());
    if (command.kind == app::Command::Kind::Train) app::validate(command.train);
  } catch (const echelon::Error& e) {
    const std::string message = e.what();
    if (message.empty()) fuzz::finding("empty error message");
  } catch (const std::exception& e) {
    fuzz::finding(std::string("exception other than echelon::Error: ") + e.what());
  }
  return 0;
}
