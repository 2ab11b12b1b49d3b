// The `echelon` command line: flags -> Command (see command.h).
#include <echelon/app/cli/command.h>
#include <echelon/app/cli/dist_flags.h>
#include <echelon/app/cli/parse_error.h>
#include <echelon/app/cli/seed_flag.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include <echelon/base/error.h>
#include <echelon/base/json.h>
#include <echelon/parallel/schedule.h>

namespace echelon::app {
namespace {

// `--schedule` names either an LR schedule or a pipeline schedule (the names do not overlap);
// `--lr-schedule` and `--schedule-pipeline` are the unambiguous spellings.
struct ScheduleFlag {
  std::string value;
  bool sets_lr_schedule = false;  // set by route_schedule_flag: --schedule named an LR schedule
};

void route_schedule_flag(const CLI::App& cmd, ScheduleFlag& flag, TrainOptions& train,
                         PipelineFlags& pipeline) {
  pipeline.schedule_given = cmd.count("--schedule-pipeline") > 0;
  if (cmd.count("--schedule") == 0) return;
  if (parallel::find_schedule(flag.value)) {
    pipeline.schedule_given = true;
    ECH_CHECK(cmd.count("--schedule-pipeline") == 0 || pipeline.schedule_text == flag.value,
              "--schedule ", flag.value, " and --schedule-pipeline ", pipeline.schedule_text,
              " disagree");
    pipeline.schedule_text = flag.value;
    return;
  }
  ECH_CHECK(cmd.count("--lr-schedule") == 0 || train.schedule == flag.value, "--schedule ",
            flag.value, " and --lr-schedule ", train.schedule, " disagree");
  train.schedule = flag.value;  // an unknown name is rejected by validate(), naming both kinds
  flag.sets_lr_schedule = true;
}

// An LR schedule's own flag given while another schedule runs would be ignored without a word.
void check_schedule_flags(const CLI::App& cmd, const TrainOptions& o) {
  const auto given_without = [&](const char* flag, bool applies, const char* schedules) {
    ECH_CHECK(cmd.count(flag) == 0 || applies, flag, " applies to --lr-schedule ", schedules,
              ", and this run's LR schedule is ", o.schedule, "; add --lr-schedule ", schedules,
              " or drop ", flag);
  };
  given_without("--step-size", o.schedule == "step", "step");
  given_without("--milestones", o.schedule == "multistep", "multistep");
  given_without("--gamma", o.schedule == "step" || o.schedule == "multistep",
                "step (or multistep)");
}

// `--workers auto | N`: an int option cannot take "auto".
void add_workers_option(CLI::App& cmd, int& workers, const std::string& help) {
  cmd.add_option_function<std::string>(
         "--workers",
         [&workers](const std::string& text) {
           try {
             workers = parse_workers(text);
           } catch (const Error& e) {
             throw CLI::ValidationError(e.message());
           }
         },
         help)
      ->default_str("auto");
}

void add_train_options(CLI::App& cmd, TrainOptions& o, ScheduleFlag& schedule) {
  cmd.add_option("--model", o.model, "Model name (see `echelon models`)");
  cmd.add_option("--data", o.data, "fashion-mnist | mnist | cifar10 | synthetic | folder");
  cmd.add_option("--data-dir", o.data_dir, "Dataset folder (default: the dataset's usual place)");
  cmd.add_option("--epochs", o.epochs, "Epochs to train (an epoch counts fresh examples)");
  cmd.add_option("--batch-size", o.batch_size, "Mini-batch size");
  cmd.add_option("--lr", o.lr, "Learning rate");
  cmd.add_option("--momentum", o.momentum, "SGD momentum");
  cmd.add_flag("--nesterov", o.nesterov, "Nesterov momentum");
  cmd.add_option("--wd", o.wd, "Weight decay");
  cmd.add_option("--ema", o.ema,
                 "Keep a moving average of the weights with this decay per step (e.g. 0.99) and "
                 "evaluate it (test accuracy, checkpoints' eval); 0: none");
  cmd.add_option("--schedule", schedule.value,
                 "LR schedule (constant | step | multistep | cosine) or pipeline schedule"
                 " (sequential | stale | stash | gpipe | hybrid)");
  // Checked here so the error names this flag and only LR schedules (validate() cannot tell
  // --lr-schedule from --schedule, which takes pipeline schedules too).
  cmd.add_option("--lr-schedule", o.schedule, "LR schedule: constant | step | multistep | cosine")
      ->check(CLI::IsMember({"constant", "step", "multistep", "cosine"}));
  cmd.add_option("--warmup-epochs", o.warmup_epochs, "Linear LR warm-up length in epochs");
  cmd.add_option("--step-size", o.step_size, "Epochs between decays (--schedule step)");
  cmd.add_option("--milestones", o.milestones, "Decay epochs, e.g. 30,60 (--schedule multistep)")
      ->delimiter(',');
  cmd.add_option("--gamma", o.gamma, "Decay factor (step, multistep)");
  cmd.add_option("--device", o.device, "auto | cpu | cuda | cuda:N");
  cmd.add_option("--conv-impl", o.conv_impl, "Convolution on CUDA: ours | cudnn");
  cmd.add_option(
      "--precision", o.precision,
      "Matmul and conv compute on CUDA: fp32 | tf32 | bf16 (tensor cores; fp32 storage)");
  cmd.add_option("--seed", o.seed, "Seed of model init, shuffling, augmentation and dropout")
      ->check(seed_range());
  cmd.add_option("--threads", o.threads,
                 "CPU threads for the ops (our pool; OpenBLAS always single-threaded); 0: one");
  cmd.add_option("--out", o.out, "Run folder for config, metrics, summary, checkpoint, report");
  cmd.add_option("--resume", o.resume, "Continue the run in this folder from its checkpoint");
  cmd.add_flag("--overwrite", o.overwrite, "Let --out replace the folder of another run");
  cmd.add_flag("--resident-data", o.resident_data,
               "Keep the whole data set on the device; batches gathered there (no loader threads)");
  cmd.add_option("--target-accuracy", o.target_accuracy,
                 "Stop once test accuracy reaches this fraction; report the time to it");
  // Two callbacks, not "--fuse,!--no-fuse": CLI11's help shows that as "--fuse,--no-fuse{false}".
  cmd.add_flag_callback(
      "--fuse", [&o] { o.fuse = true; },
      "Run the fused layer pairs (conv + bias + ReLU, batch norm + ReLU (+ residual), ReLU + max "
      "pooling) as one kernel each (the default)");
  cmd.add_flag_callback(
      "--no-fuse", [&o] { o.fuse = false; },
      "Run those pairs as separate ops: the same values, to measure what fusing gains");
  cmd.add_flag("--autotune", o.autotune,
               "Time our CUDA convolution's kernel configurations per layer shape in the first "
               "step and keep the fastest (like cudnn.benchmark; listed in summary.json); with "
               "--conv-impl cudnn, cuDNN's algorithms");
  cmd.add_flag("--deterministic", o.deterministic,
               "Refuse settings that break bit-identical reruns (echo auto, workers > 1)");
  cmd.add_option("--limit-train", o.limit_train, "Use only the first N training examples");
  cmd.add_option("--limit-test", o.limit_test, "Use only the first N test examples");
  cmd.add_option("--augment", o.augment,
                 "Training augmentation: default (the data set's: crop:4,flip for cifar10, else "
                 "none), none, or a comma list of crop:P (pad P, random crop) and flip");
  cmd.add_option("--resize", o.resize,
                 "Image folders: shorter side to N, then an N x N crop (random for training, "
                 "centred for test); 0: images must be square and of one size");
  cmd.add_option("--echo", o.echo,
                 "Data echoing factor E (1 to 1000; fractions by a seeded draw), or auto");
  cmd.add_option("--echo-at", o.echo_at, "before-augment | after-augment | batch");
  cmd.add_option("--shuffle-buffer", o.shuffle_buffer, "Shuffle buffer after echoing (items)");
  add_workers_option(cmd, o.workers,
                     "Worker threads per data stage: auto (0 for an in-memory data set on the "
                     "CPU, else 1), 0 (inline on the training thread) or N (> 1 may reorder "
                     "examples)");
  cmd.add_option("--log-every", o.log_every, "Steps between metrics.jsonl step records");
  cmd.add_option("--progress", o.progress, "auto | bar | lines | none");
  cmd.add_option("--stop-after-epoch", o.stop_after_epoch,
                 "Stop after this many epochs as if interrupted (for testing --resume)");
}

// With --resume, the options come from DIR/config.json; flags given explicitly override them.
TrainOptions merge_resume(const CLI::App& cmd, const TrainOptions& given,
                          const ScheduleFlag& schedule) {
  // The checkpoint file itself (as eval takes it): point at its folder, which holds the config.
  std::error_code error;
  ECH_CHECK(std::filesystem::exists(given.resume, error), "--resume ", given.resume,
            ": no such folder (give the --out folder of an earlier run)");
  ECH_CHECK(!std::filesystem::is_regular_file(given.resume, error), "--resume ", given.resume,
            ": is a file; give the run folder that holds it and config.json (--resume ",
            std::filesystem::path(given.resume).parent_path().string(), ")");
  const std::string config_path = (std::filesystem::path(given.resume) / "config.json").string();
  ECH_CHECK(std::filesystem::exists(config_path), "--resume ", given.resume,
            ": no config.json there (not a run folder?)");
  json::Value merged = json::parse_file(config_path);
  ECH_CHECK(merged.is_object(), config_path, ": expected a JSON object");
  // The checkpoint's weights fit one model only: say so before anything is loaded.
  const json::Value* run_model = merged.find("model");
  ECH_CHECK(cmd.count("--model") == 0 || !run_model || !run_model->is_string() ||
                run_model->as_string() == given.model,
            "--resume ", given.resume, ": that run trains ",
            run_model && run_model->is_string() ? run_model->as_string() : "", ", and --model ",
            given.model, " cannot continue it; drop --model, or start a new run with --out DIR");
  const json::Value flags = given.to_json();
  for (const auto& [key, value] : flags.as_object()) {
    if (key == "engine") continue;  // the pipeline flags: restore_pipeline_flags
    const bool given_flag = key == "schedule"
                                ? cmd.count("--lr-schedule") > 0 || schedule.sets_lr_schedule
                            : key == "fuse" ? cmd.count("--fuse") + cmd.count("--no-fuse") > 0
                                            : cmd.count("--" + key) > 0;
    if (given_flag) merged.set(key, value);
  }
  TrainOptions options = TrainOptions::from_json(merged);
  options.resume = given.resume;
  if (cmd.count("--out") == 0) options.out = given.resume;
  options.progress = given.progress;
  options.overwrite = given.overwrite;
  options.stop_after_epoch = given.stop_after_epoch;
  return options;
}

void add_eval_options(CLI::App& cmd, EvalOptions& o) {
  cmd.add_option("--checkpoint", o.checkpoint,
                 "A .safetensors checkpoint, or a run folder (its checkpoint.safetensors)")
      ->required();
  cmd.add_option("--data", o.data, "Dataset (default: the checkpoint's)");
  cmd.add_option("--data-dir", o.data_dir, "Dataset folder");
  cmd.add_option("--device", o.device, "auto | cpu | cuda | cuda:N");
  cmd.add_option("--batch-size", o.batch_size, "Evaluation batch size");
  cmd.add_option("--threads", o.threads, "CPU threads for the ops (as train's); 0: leave as is");
  cmd.add_flag("--live-weights", o.live_weights,
               "A --ema run's checkpoint: evaluate the trained weights, not their moving average");
  cmd.add_option("--limit-test", o.limit_test, "Use only the first N examples");
  add_workers_option(cmd, o.workers,
                     "Worker threads per pipeline stage: auto (0 for an in-memory data set on the "
                     "CPU, else 1), 0 (inline on the calling thread) or N");
}

// CLI11 reads an unknown first word as a stray argument ("A subcommand is required"): name it and
// list the subcommands instead.
void check_subcommand(const CLI::App& root, int argc, const char* const* argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  std::string known;
  for (const CLI::App* sub : root.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return;
    known += (known.empty() ? "" : ", ") + sub->get_name();
  }
  ECH_FAIL("unknown subcommand '", argv[1], "' (expected one of: ", known, ")");
}

}  // namespace

Command parse_command_line(int argc, const char* const* argv) {
  Command command;
  CLI::App root{"echelon: train and evaluate CNNs (CPU and CUDA, pipeline-parallel)", "echelon"};
  root.require_subcommand(1);
  root.set_version_flag("--version", std::string("echelon ") + ECHELON_VERSION);
  root.option_defaults()->always_capture_default();  // --help shows every default

  ScheduleFlag schedule_flag;
  CLI::App* train_cmd = root.add_subcommand("train", "Train a model");
  add_train_options(*train_cmd, command.train, schedule_flag);
  add_pipeline_options(*train_cmd, command.pipeline);
  add_distributed_options(*train_cmd, command.pipeline.options);

  CLI::App* eval_cmd = root.add_subcommand("eval", "Evaluate a checkpoint on a test set");
  add_eval_options(*eval_cmd, command.eval);

  CLI::App* models_cmd = root.add_subcommand("models", "List the models and their sizes");
  add_bench_command(root, command.bench);
  add_launch_command(root, command.launch);
  add_reproduce_command(root, command.reproduce);

  check_subcommand(root, argc, argv);
  // `launch`: CLI11 sees launch's own flags; the words after `--` are the ranks' command.
  const bool launching = argc >= 2 && std::string(argv[1]) == "launch";
  const int parsed_argc = launching ? launch_flags_end(argc, argv) : argc;
  try {
    root.parse(parsed_argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help (CallForHelp, CallForAllHelp) is a "parse error" with exit code 0.
    if (e.get_exit_code() == 0) {
      std::ostringstream out, err;
      command.exit_code = root.exit(e, out, err);
      command.text = out.str() + err.str();
      return command;
    }
    throw Error(explain_parse_error(root, e, parsed_argc, argv));  // one line, no source location
  }
  if (*models_cmd) {
    command.kind = Command::Kind::Models;
    return command;
  }
  if (*eval_cmd) {
    command.kind = Command::Kind::Eval;
    return command;
  }
  if (*command.launch.launch) {
    command.kind = Command::Kind::Launch;
    const std::vector<std::string> rank_command(argv + std::min(parsed_argc + 1, argc),
                                                argv + argc);
    std::error_code error;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
    finish_launch_command(command.launch, rank_command, error ? argv[0] : self.string());
    return command;
  }
  if (*command.bench.bench) {
    command.kind = Command::Kind::Bench;
    finish_bench_command(command.bench);
    return command;
  }
  if (*command.reproduce.reproduce) {
    command.kind = Command::Kind::Reproduce;
    finish_reproduce_command(command.reproduce);
    return command;
  }
  command.kind = Command::Kind::Train;
  route_schedule_flag(*train_cmd, schedule_flag, command.train, command.pipeline);
  if (!command.train.resume.empty()) {
    command.train = merge_resume(*train_cmd, command.train, schedule_flag);
    restore_pipeline_flags(*train_cmd, command.train.engine, command.pipeline);
    restore_distributed_flags(*train_cmd, command.train.engine, command.pipeline.options);
  }
  check_schedule_flags(*train_cmd, command.train);
  ECH_CHECK(train_cmd->count("--bucket-mb") == 0 || command.pipeline.options.data_parallel > 1,
            "--bucket-mb sums the gradients of data-parallel replicas, and this run has one: add "
            "--data-parallel R (R >= 2, under mpirun or echelon launch) or drop --bucket-mb");
  // Else the trace writer's error names the path but not the flag.
  const std::string& trace = command.pipeline.options.trace_path;
  std::error_code error;
  ECH_CHECK(trace.empty() || !std::filesystem::is_directory(trace, error), "--trace ", trace,
            ": is a folder; give a file name, e.g. ",
            (std::filesystem::path(trace) / "trace.json").string());
  finish_pipeline_options(*train_cmd, command.pipeline, static_cast<int>(command.train.epochs));
  // The batches enter on the first partition's device unless --device says otherwise.
  const std::vector<Device>& devices = command.pipeline.options.devices;
  if (!devices.empty() && train_cmd->count("--device") == 0)
    command.train.device = devices.front().to_string();
  if (command.pipeline.options.cuda_graph) {
    ECH_CHECK(!command.pipeline.enabled() && command.pipeline.options.data_parallel == 1,
              "--cuda-graph captures the single-device training step: it cannot be combined "
              "with --pipeline, --ppv or --data-parallel");
    const Device device = resolve_device(command.train.device);
    ECH_CHECK(device.is_cuda(), "--cuda-graph needs a CUDA device, but --device ",
              command.train.device, " is ", device.to_string(),
              ": a CUDA graph replays GPU work (drop the flag on the CPU)");
  }
  command.train.engine = pipeline_flags_to_json(command.pipeline);
  command.train.engine.set("data-parallel", command.pipeline.options.data_parallel);
  command.train.engine.set("bucket-mb", command.pipeline.options.bucket_mb);
  return command;
}

}  // namespace echelon::app
