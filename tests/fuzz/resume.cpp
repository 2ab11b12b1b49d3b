// `echelon train --resume DIR`: DIR/config.json (fuzzed) is read, merged with the flags given and
// validated before anything is touched (parse_command_line + validate, what main() runs before
// train()). Input: config.json, then optionally kSeparator and extra flags, one per line.
#include "fuzz_common.h"

#include <echelon/app/cli/command.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace app = echelon::app;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string config = fuzz::write_scratch("config.json", parts[0]);
  std::vector<std::string> args = {"echelon", "train", "--resume", fuzz::scratch_dir().string()};
  if (parts.size() > 1) {
    size_t start = 0;
    while (start <= parts[1].size() && args.size() < 24) {
      const size_t end = std::min(parts[1].find('\n', start), parts[1].size());
      args.push_back(parts[1].substr(start, end - start));
      start = end + 1;
    }
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    const app::Command command =
        app::parse_command_line(static_cast<int>(argv.size()), argv.data());
    if (command.kind == app::Command::Kind::Train) app::validate(command.train);
  } catch (const echelon::Error& e) {
    // Names the file (config.json) or the flag whose value is wrong.
    const std::string message = e.what();
    if (message.find(config) == std::string::npos && message.find("--") == std::string::npos)
      fuzz::finding("error names neither config.json nor a flag: " + message);
  } catch (const std::exception& e) {
    fuzz::finding(std::string("exception other than echelon::Error: ") + e.what());
  }
  return 0;
}
