#include <echelon/app/cli/reproduce_cmd.h>

#include <filesystem>

#include <echelon/base/error.h>
#include <echelon/data/registry.h>

namespace echelon::app {

void add_reproduce_command(CLI::App& root, ReproduceCommand& c) {
  c.reproduce = root.add_subcommand(
      "reproduce", "Run a paper's headline experiment and print its table beside ours");
  reproduce::ReproduceOptions& o = c.options;
  c.reproduce
      ->add_option("paper", o.paper,
                   "echo (Choi et al. 2019, data echoing) | pipeline (Zhang & "
                   "Abdelrahman 2019, stale-weight pipelining)")
      ->required();
  c.reproduce->add_flag("--quick", c.quick, "Small sizes: a few minutes on 2 CPU cores");
  c.reproduce->add_option("--json", o.json_path, "Also write the tables to this file as JSON");
  c.reproduce->add_option("--data-dir", o.data_dir, "Fashion-MNIST folder");
  // Tests only: "smoke" runs each table at a size of seconds.
  c.reproduce->add_option("--size", c.size)->group("");
}

void finish_reproduce_command(ReproduceCommand& c) {
  ECH_CHECK(c.options.paper == "echo" || c.options.paper == "pipeline",
            "reproduce: unknown paper '", c.options.paper, "' (expected echo or pipeline)");
  ECH_CHECK(c.size.empty() || c.size == "smoke", "reproduce: --size must be smoke (got '", c.size,
            "')");
  c.options.size = !c.size.empty() ? reproduce::ReproduceSize::Smoke
                   : c.quick       ? reproduce::ReproduceSize::Quick
                                   : reproduce::ReproduceSize::Full;
}

int run_reproduce_command(const ReproduceCommand& c, std::ostream& out) {
  // Both papers' tables end with Fashion-MNIST training after minutes of timing runs, and --json
  // is written last: a missing data set or an unwritable --json must fail now, not then.
  const std::string& json = c.options.json_path;
  if (!json.empty()) {
    const std::filesystem::path parent = std::filesystem::path(json).parent_path();
    std::error_code error;
    ECH_CHECK(!std::filesystem::is_directory(json, error), "--json ", json,
              ": is a folder; give a file name, e.g. ",
              (std::filesystem::path(json) / "reproduce.json").string());
    ECH_CHECK(parent.empty() || std::filesystem::is_directory(parent, error), "--json ", json,
              ": no folder ", parent.string(), "/ to write it in");
  }
  data::DatasetLimits probe;  // one test example: the folder and the t10k files are there
  probe.test_only = true;
  probe.test = 1;
  data::load_dataset("fashion-mnist", c.options.data_dir, probe);
  if (c.options.paper == "echo") {
    reproduce::reproduce_echo(c.options, out);
  } else {
    reproduce::reproduce_pipeline(c.options, out);
  }
  return 0;
}

}  // namespace echelon::app
