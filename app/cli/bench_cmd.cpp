#include <echelon/app/cli/bench_cmd.h>
#include <echelon/app/cli/seed_flag.h>

#include <cstdio>

#include <echelon/base/error.h>
#include <echelon/parallel/schedule.h>

namespace echelon::app {

namespace {

void add_common(CLI::App& cmd, BenchCommon& common) {
  cmd.add_option("--device", common.device, "auto | cpu | cuda | cuda:N");
  cmd.add_option("--threads", common.threads, "CPU threads for the ops (our pool); 0: default");
  cmd.add_option("--json", common.json_path, "Also write the result to this file as JSON");
  cmd.add_option("--html", common.html_path, "Also write a report page: the table, bar charts");
  cmd.add_flag(
      "--autotune", common.autotune,
      "Tune the CUDA convolution per layer shape, ours or cuDNN's (in the warm-up rounds; picks "
      "in --json)");
}

void add_op(CLI::App& bench, BenchCommand& c) {
  c.op =
      bench.add_subcommand("op", "Time one op of tensor/ops.h, implementation by implementation");
  parallel::OpBenchOptions& o = c.op_options;
  c.op->add_option("name", o.op, "The op (see --list)");
  c.op->add_flag("--list", c.list_ops, "List the ops, their families, default shapes and impls");
  c.op->add_option("--input", o.input, "Input shape, e.g. 64,16,32,32 (default: the op's)")
      ->delimiter(',');
  c.op->add_option("--out-channels", o.out_channels, "conv2d filters (default: input channels)");
  c.op->add_option("--kernel", o.kernel, "conv2d / pooling / im2col window (default 3 / 2)");
  c.op->add_option("--stride", o.stride, "Window stride (default: 1 conv, the kernel pooling)");
  c.op->add_option("--pad", o.pad, "Padding (default: kernel/2 conv, 0 pooling)");
  c.op->add_option("--n", o.n, "matmul: columns N of the (K, N) right-hand side (default K)");
  c.op->add_option("--impl", o.impls,
                   "Implementations, baseline first: cpu naive,fast; cuda cudnn|cublas,ours")
      ->delimiter(',');
  c.op->add_option("--warmup", o.warmup, "Untimed rounds first");
  c.op->add_option("--repeats", o.repeats, "Timed rounds (median and spread over them)");
  c.op->add_option("--seed", o.seed, "Seed of the random inputs")->check(seed_range());
  add_common(*c.op, c.op_common);
}

void add_model_input(CLI::App& cmd, parallel::ModelInput& in) {
  cmd.add_option("--batch-size", in.batch_size, "Mini-batch size");
  cmd.add_option("--channels", in.channels, "Image channels (default: 1 lenet5, else 3)");
  cmd.add_option("--image-size", in.image_size, "Image height = width (default: 28 / 32)");
  cmd.add_option("--classes", in.classes, "Classes of the last layer");
  cmd.add_option("--seed", in.seed, "Seed of the model and the random batches")
      ->check(seed_range());
}

void add_model(CLI::App& bench, BenchCommand& c) {
  c.model = bench.add_subcommand("model", "Time a model's training step, whole and layer by layer");
  parallel::ModelBenchOptions& o = c.model_options;
  c.model->add_option("net", o.input.model, "Model name (see `echelon models`)");
  add_model_input(*c.model, o.input);
  c.model->add_flag("--per-layer", o.per_layer, "Each layer's forward and backward time");
  c.model->add_flag("--split-blocks", o.split_blocks,
                    "Per layer: each residual block as four layers (the numbering of train's "
                    "--ppv with --split-blocks)");
  c.model->add_option("--warmup", o.warmup, "Untimed rounds first");
  c.model->add_option("--repeats", o.repeats, "Timed rounds");
  add_common(*c.model, c.model_common);
}

void add_pipeline(CLI::App& bench, BenchCommand& c) {
  c.pipeline = bench.add_subcommand("pipeline", "Partitions of a pipelined run vs one worker");
  parallel::PipelineBenchOptions& o = c.pipeline_options;
  c.pipeline->add_option("--model", o.input.model, "Model name (see `echelon models`)");
  add_model_input(*c.pipeline, o.input);
  add_pipeline_options(*c.pipeline, c.pipeline_flags);
  c.pipeline_flags.options.partitions = 2;  // the benchmark's default: a real pipeline
  c.pipeline->get_option("--pipeline")->capture_default_str();
  c.pipeline->add_option("--schedule", c.pipeline_schedule,
                         "sequential | stale | stash | gpipe | hybrid (default: stale)");
  c.pipeline->add_option("--warmup", o.warmup, "Mini-batches before the measured window");
  c.pipeline->add_option("--steps", o.steps, "Measured mini-batches");
  add_common(*c.pipeline, c.pipeline_common);
}

void add_loader(CLI::App& bench, BenchCommand& c) {
  c.loader = bench.add_subcommand("loader", "Rates of the data loader's stages and echoing");
  LoaderBenchSpec& s = c.loader_spec;
  data::LoaderOptions& l = s.options.loader;
  c.loader->add_option("--data", s.data, "fashion-mnist | mnist | cifar10 | synthetic | folder");
  c.loader->add_option("--data-dir", s.data_dir, "Dataset folder");
  c.loader->add_option("--limit", s.limit, "Use only the first N training examples");
  c.loader->add_option("--batch-size", l.batch_size, "Mini-batch size");
  c.loader->add_option("--workers", l.workers,
                       "Worker threads per read/decode/augment stage (0: inline in next())");
  c.loader->add_option("--echo", s.echo,
                       "Data echoing factor E (1 to 1000; fractions by a seeded draw), or auto");
  c.loader->add_option("--echo-at", s.echo_at, "before-augment | after-augment | batch");
  c.loader->add_option("--shuffle-buffer", l.shuffle_buffer, "Shuffle buffer after echoing");
  c.loader->add_option("--ring-capacity", l.ring_capacity, "Items per ring between stages");
  c.loader->add_option("--batches", s.options.max_batches, "Stop after N batches (0: an epoch)");
  c.loader->add_option("--model", s.model, "Consumer: a training step of this model per batch");
  c.loader->add_option("--step-ms", s.step_ms, "Consumer: sleep this long per batch instead");
  c.loader->add_option("--seed", l.seed, "Seed of shuffling and augmentation")->check(seed_range());
  add_common(*c.loader, c.loader_common);
}

int list_ops(std::ostream& out) {
  char text[160];
  std::snprintf(text, sizeof text, "%-14s %-12s %-18s %s\n", "op", "family", "default input",
                "cpu impls");
  out << text;
  for (const parallel::BenchOpInfo& op : parallel::bench_ops()) {
    std::string shape, impls;
    for (const int64_t d : op.default_input)
      shape += (shape.empty() ? "" : ",") + std::to_string(d);
    for (const std::string& impl : parallel::op_impls(op.name, Device::cpu()))
      impls += (impls.empty() ? "" : ",") + impl;
    std::snprintf(text, sizeof text, "%-14s %-12s %-18s %s\n", op.name.c_str(), op.family.c_str(),
                  shape.c_str(), impls.c_str());
    out << text;
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& root, BenchCommand& c) {
  c.bench = root.add_subcommand("bench", "Microbenchmarks: ops, models, pipelines, the loader");
  c.bench->require_subcommand(1);
  c.bench->option_defaults()->always_capture_default();  // --help shows every default
  add_op(*c.bench, c);
  add_model(*c.bench, c);
  add_pipeline(*c.bench, c);
  add_loader(*c.bench, c);
}

void finish_bench_command(BenchCommand& c) {
  using Which = BenchCommand::Which;
  if (*c.op) {
    c.which = Which::Op;
  } else if (*c.model) {
    c.which = Which::Model;
  } else if (*c.pipeline) {
    c.which = Which::Pipeline;
    if (!c.pipeline_schedule.empty()) c.pipeline_flags.schedule_text = c.pipeline_schedule;
    finish_pipeline_options(*c.pipeline, c.pipeline_flags, 1);
    c.pipeline_options.pipeline = c.pipeline_flags.options;
  } else {
    c.which = Which::Loader;
  }
}

int run_bench_command(BenchCommand& c, std::ostream& out) {
  switch (c.which) {
    case BenchCommand::Which::Op:
      if (c.list_ops) return list_ops(out);
      ECH_CHECK(!c.op_options.op.empty(), "bench op: name an op (see `echelon bench op --list`)");
      bench_op(c.op_common, c.op_options, out);
      break;
    case BenchCommand::Which::Model:
      bench_model(c.model_common, c.model_options, out);
      break;
    case BenchCommand::Which::Pipeline:
      bench_pipeline(c.pipeline_common, c.pipeline_options, out);
      break;
    case BenchCommand::Which::Loader:
      bench_loader(c.loader_common, c.loader_spec, out);
      break;
  }
  return 0;
}

}  // namespace echelon::app
