// The pipeline flags for the `echelon train` command. Header-only so that the library itself does
// not depend on CLI11; the CLI (app/cli, owned by `train`) calls add_pipeline_options and,
// when --pipeline > 1 or a --ppv is given, builds its engine with pipeline_engine_factory.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include <echelon/app/flags.h>
#include <echelon/base/json.h>
#include <echelon/parallel/partition.h>
#include <echelon/parallel/pipeline.h>

namespace echelon::app {

// Fills `options` from the flags; `schedule_text` and `balance_text` are parsed by
// finish_pipeline_options after CLI11 has run (errors then name the flag).
struct PipelineFlags {
  parallel::PipelineOptions options;
  std::string schedule_text = "stale";
  std::string balance_text = "none";
  std::string devices_text;     // --devices: parsed into options.devices by finish_pipeline_options
  bool schedule_given = false;  // --schedule-pipeline, or --schedule naming a pipeline schedule
  bool enabled() const { return options.partitions > 1 || !options.ppv.empty(); }
};

inline void add_pipeline_options(CLI::App& app, PipelineFlags& flags) {
  parallel::PipelineOptions& o = flags.options;
  o.partitions = 1;
  app.add_option("--pipeline", o.partitions, "Pipeline partitions K (1: no pipelining)");
  app.add_option("--ppv", o.ppv, "Partition start layers, e.g. 2,5 (three partitions)");
  app.add_option("--balance", flags.balance_text, "none | auto (profile layers, DP cut)");
  app.add_flag("--split-blocks", o.split_blocks,
               "Count each residual block as four layers, so --ppv / --balance can cut inside it");
  app.add_option("--schedule-pipeline", flags.schedule_text,
                 "sequential | stale | stash | gpipe | hybrid");
  app.add_option("--micro-batches", o.micro_batches, "GPipe micro-batches per mini-batch");
  app.add_option("--hybrid-switch", o.hybrid_switch,
                 "Hybrid: epoch (>= 1) or fraction of epochs (< 1) to switch to sequential");
  app.add_option("--devices", flags.devices_text,
                 "Devices of the partitions, e.g. cuda:0,cuda:1 (one each, or a count dividing K)");
  app.add_option("--trace", o.trace_path, "Write a Chrome trace JSON of the pipeline");
  app.add_flag("--predict-weights", o.predict_weights,
               "stale/hybrid: forward on weights extrapolated by momentum (not in the paper)");
  app.add_flag("--cuda-graph", o.cuda_graph,
               "Single-device GPU training: capture the training step once as a CUDA graph and "
               "replay it for every batch of the same shape (docs/cuda-graph.md)");
}

// Flags that only mean something for a pipeline are errors without one (rather than being
// silently ignored), and --pipeline K must agree with the partitions a --ppv gives.
inline void check_pipeline_flags_agree(const CLI::App& cmd, PipelineFlags& flags) {
  parallel::PipelineOptions& o = flags.options;
  if (!o.ppv.empty()) {
    const int from_ppv = static_cast<int>(
        parse_flag("--ppv", [&] { return parallel::parse_ppv(o.ppv); }).size() + 1);
    ECH_CHECK(cmd.count("--pipeline") == 0 || o.partitions == from_ppv, "--pipeline ", o.partitions,
              " and --ppv ", o.ppv, " (", from_ppv, " partitions) disagree");
    o.partitions = from_ppv;
  }
  if (flags.enabled() || flags.balance_text == "auto") return;
  for (const char* flag :
       {"--micro-batches", "--hybrid-switch", "--predict-weights", "--devices", "--split-blocks"})
    ECH_CHECK(cmd.count(flag) == 0, flag,
              " needs a pipeline: add --pipeline K (K >= 2), --ppv or --balance auto");
  // "sequential" is what a single device does anyway.
  ECH_CHECK(!flags.schedule_given || flags.schedule_text == "sequential", "pipeline schedule '",
            flags.schedule_text,
            "' needs a pipeline: add --pipeline K (K >= 2), --ppv or --balance auto");
}

// The flags as config.json's "engine" object (keys: the flag names without "--"). The trace path
// is an output of this invocation, not a property of the run, and is not saved.
inline json::Value pipeline_flags_to_json(const PipelineFlags& flags) {
  const parallel::PipelineOptions& o = flags.options;
  return json::Value::object()
      .set("pipeline", o.partitions)
      .set("ppv", o.ppv)
      .set("balance", flags.balance_text)
      .set("split-blocks", o.split_blocks)
      .set("schedule-pipeline", flags.schedule_text)
      .set("micro-batches", o.micro_batches)
      .set("hybrid-switch", o.hybrid_switch)
      .set("predict-weights", o.predict_weights);
}

// On --resume: each flag not given again takes its value from the run's config.json ("engine",
// read by TrainOptions::from_json), so a pipelined run resumes pipelined. The partition flags
// (--pipeline, --ppv, --balance, --split-blocks) go together: giving any one of them replaces all
// four.
inline void restore_pipeline_flags(const CLI::App& cmd, const json::Value& saved,
                                   PipelineFlags& flags) {
  parallel::PipelineOptions& o = flags.options;
  auto restore = [&](const char* key, bool given, auto&& assign) {
    const json::Value* value = saved.find(key);
    if (given || !value) return;
    try {
      assign(*value);
    } catch (const Error& e) {
      ECH_FAIL("config.json: engine key \"", key, "\": ", e.message());
    }
  };
  const bool partition_given = cmd.count("--pipeline") + cmd.count("--ppv") +
                                   cmd.count("--balance") + cmd.count("--split-blocks") >
                               0;
  restore("pipeline", partition_given,
          [&](const json::Value& v) { o.partitions = static_cast<int>(v.as_int()); });
  restore("ppv", partition_given, [&](const json::Value& v) { o.ppv = v.as_string(); });
  restore("balance", partition_given,
          [&](const json::Value& v) { flags.balance_text = v.as_string(); });
  restore("split-blocks", partition_given,
          [&](const json::Value& v) { o.split_blocks = v.as_bool(); });
  restore("schedule-pipeline", flags.schedule_given,
          [&](const json::Value& v) { flags.schedule_text = v.as_string(); });
  restore("micro-batches", cmd.count("--micro-batches") > 0,
          [&](const json::Value& v) { o.micro_batches = static_cast<int>(v.as_int()); });
  restore("hybrid-switch", cmd.count("--hybrid-switch") > 0,
          [&](const json::Value& v) { o.hybrid_switch = v.as_double(); });
  restore("predict-weights", cmd.count("--predict-weights") > 0,
          [&](const json::Value& v) { o.predict_weights = v.as_bool(); });
}

// After parsing: schedule and balance from text, epochs for a fractional hybrid switch. Checks
// each flag here so that the error names it; PipelineOptions::validate() then checks the whole.
inline void finish_pipeline_options(const CLI::App& cmd, PipelineFlags& flags, int total_epochs) {
  parallel::PipelineOptions& o = flags.options;
  check_pipeline_flags_agree(cmd, flags);
  o.schedule = parse_flag("--schedule-pipeline",
                          [&] { return parallel::parse_schedule(flags.schedule_text); });
  ECH_CHECK(flags.balance_text == "none" || flags.balance_text == "auto", "--balance: expected ",
            "none or auto, got '", flags.balance_text, "'");
  o.balance_auto = flags.balance_text == "auto";
  o.total_epochs = total_epochs;
  if (o.balance_auto && o.partitions < 2) o.partitions = 2;
  ECH_CHECK(o.partitions >= 1, "--pipeline must be >= 1, got ", o.partitions);
  ECH_CHECK(o.micro_batches >= 1, "--micro-batches must be >= 1, got ", o.micro_batches);
  ECH_CHECK(!(o.balance_auto && !o.ppv.empty()), "--ppv and --balance auto exclude each other");
  if (!o.ppv.empty()) parse_flag("--ppv", [&] { return parallel::parse_ppv(o.ppv); });
  if (o.schedule == parallel::ScheduleKind::Hybrid)
    parse_flag("--hybrid-switch", [&] { return o.hybrid_switch_epoch(); });
  if (!flags.devices_text.empty()) {
    o.devices = parse_flag("--devices", [&] {
      return parallel::parse_partition_devices(flags.devices_text, o.partitions);
    });
    // Checked now, before any run folder is touched: every device must be present.
    const int present = cuda_device_count();
    for (const Device& device : o.devices)
      ECH_CHECK(!device.is_cuda() || device.index < present, "--devices ", flags.devices_text, ": ",
                device.to_string(), " is not present (", present, " CUDA device(s))");
  }
  o.validate();
}

}  // namespace echelon::app
