#include <echelon/app/cli/reproduce_cmd.h>

#include <echelon/base/error.h>

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
  if (c.options.paper == "echo") {
    reproduce::reproduce_echo(c.options, out);
  } else {
    reproduce::reproduce_pipeline(c.options, out);
  }
  return 0;
}

}  // namespace echelon::app
