// The `echelon` command line (app/cli/command.cpp, what main() runs): argv is the input split at
// newlines (argv[0] = "echelon"), then validate() for `train`, as train() does first. Errors must
// be one line (the CLI prints "echelon: error: <message>"). `bench op` options (the op, --input
// shape, --impl) are checked as the benchmark checks them before running. Every argument with a '/'
// becomes the scratch folder, which holds a run (a valid config.json): `--out /x` meets an existing
// run and
// `--resume /x` resumes it (the resume target fuzzes the config.json itself).
#include "fuzz_common.h"

#include <algorithm>

#include <echelon/app/cli/command.h>
#include <echelon/parallel/op_bench.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace app = echelon::app;
  static const bool run_folder = [] {
    fuzz::write_scratch(
        "config.json", R"({"model":"lenet5","data":"synthetic","epochs":2,"batch-size":16,)"
                       R"("lr":0.01,"device":"cpu","schedule":"constant","engine":{"pipeline":1,)"
                       R"("ppv":"","balance":"none","schedule-pipeline":"stale","micro-batches":1,)"
                       R"("hybrid-switch":0.5,"predict-weights":false,"data-parallel":1}})");
    return true;
  }();
  (void)run_folder;
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
    // `bench op`: the op, its shape (--input) and implementations are checked before it runs.
    if (command.kind == app::Command::Kind::Bench &&
        command.bench.which == app::BenchCommand::Which::Op && !command.bench.list_ops &&
        !command.bench.op_options.op.empty())
      echelon::parallel::check_op_bench_options(command.bench.op_options);
  } catch (const echelon::Error& e) {
    const std::string message = e.what();
    if (message.empty()) fuzz::finding("empty error message");
    if (message.find('\n') != std::string::npos)  // no argument holds a newline
      fuzz::finding("multi-line error message: " + message);
  } catch (const std::exception& e) {
    fuzz::finding(std::string("exception other than echelon::Error: ") + e.what());
  }
  return 0;
}
