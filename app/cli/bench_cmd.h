// `echelon bench op|model|pipeline|loader`: the flags of the microbenchmarks (app/bench.h).
//   echelon bench op conv2d --input 64,16,32,32 --out-channels 32 --kernel 3 --impl naive,fast
//   echelon bench model resnet20 --batch-size 32 --per-layer
//   echelon bench pipeline --model resnet20 --pipeline 2 --schedule stale
//   echelon bench loader --data fashion-mnist --workers 2 --echo 2
#pragma once

#include <ostream>

#include <CLI/CLI.hpp>

#include <echelon/app/bench.h>
#include <echelon/app/cli/pipeline_flags.h>

namespace echelon::app {

struct BenchCommand {
  enum class Which { Op, Model, Pipeline, Loader };
  Which which = Which::Op;  // set by finish_bench_command
  CLI::App* bench = nullptr;
  CLI::App *op = nullptr, *model = nullptr, *pipeline = nullptr, *loader = nullptr;
  BenchCommon op_common, model_common, pipeline_common, loader_common;
  parallel::OpBenchOptions op_options;
  bool list_ops = false;
  parallel::ModelBenchOptions model_options;
  parallel::PipelineBenchOptions pipeline_options;
  PipelineFlags pipeline_flags;
  std::string pipeline_schedule;
  LoaderBenchSpec loader_spec;

  // The common flags of the subcommand that was given (after finish_bench_command).
  const BenchCommon& common() const {
    switch (which) {
      case Which::Model:
        return model_common;
      case Which::Pipeline:
        return pipeline_common;
      case Which::Loader:
        return loader_common;
      case Which::Op:
        break;
    }
    return op_common;
  }
};

// Registers `bench` and its four subcommands on `root`; the flags land in `command`.
void add_bench_command(CLI::App& root, BenchCommand& command);
// After parsing (while the CLI::App is alive): notes which subcommand was given and checks its
// pipeline flags.
void finish_bench_command(BenchCommand& command);
// Runs the subcommand that was given (after finish_bench_command); returns the exit status.
int run_bench_command(BenchCommand& command, std::ostream& out);

}  // namespace echelon::app
