// The `echelon` command-line tool:
//   echelon train --model lenet5 --data fashion-mnist --epochs 10 --out runs/lenet5
//   echelon train --resume runs/lenet5 --epochs 20
//   echelon eval --checkpoint runs/lenet5/checkpoint.safetensors
//   echelon models
// Every user error (bad flag value, missing dataset, damaged checkpoint) prints ONE line
// "echelon: error: ..." on stderr and exits with status 2.
#include <csignal>
#include <cstdio>
#include <iostream>

#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>
#include <echelon/app/cli/command.h>

namespace {

namespace app = echelon::app;
namespace parallel = echelon::parallel;

constexpr int kUsageError = 2;

void on_interrupt(int) {
  app::request_stop();
}

int run_models() {
  std::printf("%-10s %12s  %s\n", "model", "parameters", "description");
  for (const echelon::ModelInfo& m : echelon::list_models())
    std::printf("%-10s %12lld  %s\n", m.name.c_str(),
                static_cast<long long>(m.reference_parameters), m.description.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const app::Command command = app::parse_command_line(argc, argv);
    switch (command.kind) {
      case app::Command::Kind::Exit:
        std::cout << command.text;
        return command.exit_code;
      case app::Command::Kind::Models:
        return run_models();
      case app::Command::Kind::Eval:
        app::evaluate_checkpoint(command.eval, std::cout);
        return 0;
      case app::Command::Kind::Train:
        break;
    }
    const app::TrainOptions& options = command.train;
    const parallel::EngineFactory factory =
        command.pipeline.enabled() ? parallel::pipeline_engine_factory(command.pipeline.options)
                                   : parallel::EngineFactory{};
    std::signal(SIGINT, on_interrupt);
    const app::TrainResult result = app::train(options, std::cout, factory);
    return result.completed || options.stop_after_epoch > 0 ? 0 : 130;
  } catch (const echelon::Error& e) {
    std::cout.flush();
    std::cerr << "echelon: error: " << e.what() << "\n";
    return kUsageError;
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "echelon: error: " << e.what() << "\n";
    return kUsageError;
  }
}
