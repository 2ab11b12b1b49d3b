// The `echelon` command line, parsed: what main() runs. Separate from main.cpp so that the fuzz
// target tests/fuzz/cli.cpp calls exactly the parser the tool uses.
#pragma once

#include <string>

#include <echelon/app/cli/bench_cmd.h>
#include <echelon/app/cli/launch_cmd.h>
#include <echelon/app/cli/pipeline_flags.h>
#include <echelon/app/cli/reproduce_cmd.h>
#include <echelon/app/train.h>

namespace echelon::app {

struct Command {
  enum class Kind { Exit, Models, Train, Eval, Bench, Launch, Reproduce };
  Kind kind = Kind::Exit;
  int exit_code = 0;           // Kind::Exit: --help and friends
  std::string text;            // Kind::Exit: what to print on stdout
  TrainOptions train;          // Kind::Train: merged with DIR/config.json on --resume
  PipelineFlags pipeline;      // Kind::Train: finished (schedule, balance, validated)
  EvalOptions eval;            // Kind::Eval
  BenchCommand bench;          // Kind::Bench: finished (finish_bench_command)
  LaunchCommand launch;        // Kind::Launch: finished (the mpirun command line)
  ReproduceCommand reproduce;  // Kind::Reproduce: finished (finish_reproduce_command)
};

// Parses argv (argv[0] is the program name; an unknown subcommand is named, with the known ones)
// and, for `train`, routes --schedule, merges the options of `--resume DIR` with DIR/config.json
// and finishes the pipeline flags. Does not touch any run folder. Every bad flag, value or
// config.json throws echelon::Error (flag errors end with "(see echelon SUBCOMMAND --help)"; an
// unknown flag is named, with the nearest known one: app/cli/parse_error.h).
Command parse_command_line(int argc, const char* const* argv);

}  // namespace echelon::app
