// The `echelon` command-line tool:
//   echelon train --model lenet5 --data fashion-mnist --epochs 10 --out runs/lenet5
//   echelon train --resume runs/lenet5 --epochs 20
//   echelon eval --checkpoint runs/lenet5/checkpoint.safetensors
//   echelon models
//   echelon bench op conv2d --input 64,16,32,32 --impl naive,fast   (also model, pipeline, loader)
//   echelon launch -- train --pipeline 2 ...   (one process per partition, through mpirun)
//   echelon launch --rdzv env -- train --pipeline 2 ...   (the same, torchrun-style)
// Every user error (bad flag value, missing dataset, damaged checkpoint) prints ONE line
// "echelon: error: ..." on stderr and exits with status 2.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include <echelon/app/cli/command.h>
#include <echelon/app/cli/dist_flags.h>
#include <echelon/base/env.h>
#include <echelon/base/error.h>
#include <echelon/layers/models/registry.h>

namespace {

namespace app = echelon::app;
namespace parallel = echelon::parallel;

constexpr int kUsageError = 2;

// ECHELON_DEBUG (a flag, base/env.h): error lines also show the source location of the failing
// check, for bug reports. Read first thing in main, so that a bad value is the error reported.
bool g_error_locations = false;

// Prints one "echelon: error:" line.
int usage_error(const std::exception& e) {
  std::cout.flush();
  std::cerr << "echelon: error: " << (g_error_locations ? e.what() : echelon::message_of(e))
            << "\n";
  return kUsageError;
}

void on_interrupt(int) {
  app::request_stop();
}

// The pipeline engine when pipelining; ordinary training otherwise (the default engine, or the
// same 1-partition engine with its trace or its captured CUDA graph when --trace or --cuda-graph
// is given).
parallel::EngineFactory engine_factory(const app::PipelineFlags& flags) {
  if (flags.enabled() || flags.options.process_group)
    return parallel::pipeline_engine_factory(flags.options);
  if (flags.options.trace_path.empty() && !flags.options.cuda_graph) return {};
  parallel::PipelineOptions single = parallel::PipelineOptions::single();
  single.trace_path = flags.options.trace_path;
  single.cuda_graph = flags.options.cuda_graph;
  return parallel::pipeline_engine_factory(single);
}

// One "echelon: warning:" line on stderr when --threads exceeds the machine's threads.
void warn_threads(int threads) {
  const std::string warning = app::threads_warning(threads, std::thread::hardware_concurrency());
  if (!warning.empty()) std::cerr << "echelon: warning: " << warning << "\n";
}

int run_models() {
  std::printf("%-10s %12s  %s\n", "model", "parameters", "description");
  for (const echelon::ModelInfo& m : echelon::list_models())
    std::printf("%-10s %12lld  %s\n", m.name.c_str(),
                static_cast<long long>(m.reference_parameters), m.description.c_str());
  return 0;
}

}  // namespace

// A stream that drops everything: the output of ranks other than 0.
class NullStream : public std::ostream {
 public:
  NullStream() : std::ostream(nullptr) {}
};

int main(int argc, char** argv) {
  try {
    g_error_locations = echelon::env::flag("ECHELON_DEBUG", false);
  } catch (const std::exception& e) {
    return usage_error(e);
  }
  std::shared_ptr<parallel::ProcessGroup> world;
  try {
    app::Command command = app::parse_command_line(argc, argv);
    switch (command.kind) {
      case app::Command::Kind::Exit:
        std::cout << command.text;
        return command.exit_code;
      case app::Command::Kind::Models:
        return run_models();
      case app::Command::Kind::Eval:
        warn_threads(command.eval.threads);
        app::evaluate_checkpoint(command.eval, std::cout);
        return 0;
      case app::Command::Kind::Bench:
        warn_threads(command.bench.common().threads);
        return app::run_bench_command(command.bench, std::cout);
      case app::Command::Kind::Launch:
        if (command.launch.rendezvous == "env") {
          if (!command.launch.dry_run) return app::run_local_ranks(command.launch);
          const int local_ranks = command.launch.world_size / command.launch.nnodes;
          for (int local = 0; local < local_ranks; ++local)
            std::cout << app::shell_quoted(app::rank_environment(command.launch, local)) << " "
                      << app::shell_quoted(command.launch.argv) << "\n";
          return 0;
        }
        if (command.launch.dry_run) {
          std::cout << app::shell_quoted(command.launch.argv) << "\n";
          return 0;
        }
        app::exec_launch(command.launch);
      case app::Command::Kind::Reproduce:
        return app::run_reproduce_command(command.reproduce, std::cout);
      case app::Command::Kind::Train:
        break;
    }
    world = app::join_process_group(command.pipeline, command.train);
    const app::TrainOptions& options = command.train;
    const parallel::EngineFactory factory = engine_factory(command.pipeline);
    std::signal(SIGINT, on_interrupt);
    if (options.primary) warn_threads(options.threads);
    NullStream silent;
    std::ostream& out = options.primary ? static_cast<std::ostream&>(std::cout) : silent;
    if (world) {
      const std::string device = app::resolve_device(options.device).to_string();
      app::print_topology(*world, command.pipeline.options, device, options.threads, out);
    }
    const app::TrainResult result = app::train(options, out, factory);
    return result.completed || options.stop_after_epoch > 0 ? 0 : 130;
  } catch (const std::exception& e) {
    if (!world) return usage_error(e);
    // One process failed: name it, then end every process of the run (mpirun reports the abort),
    // so that none waits for ever on a partner that is gone.
    std::cout.flush();
    std::cerr << "echelon: error: rank " << world->rank() << " of " << world->size() << ": "
              << echelon::message_of(e) << std::endl;
    world->abort(kUsageError);
  }
}
