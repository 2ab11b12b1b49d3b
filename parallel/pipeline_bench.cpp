// `echelon bench pipeline` (run_pipeline_bench) and the JSON of both model_bench.h results.
#include <algorithm>

#include <echelon/base/error.h>
#include <echelon/parallel/model_bench.h>
#include <echelon/parallel/partition.h>

namespace echelon::parallel {

namespace {

// Feeds batches [first, first + count) and drains the engine; the wall seconds of it all.
double run_steps(StepEngine& engine, const std::vector<data::Batch>& batches, int first, int count,
                 Device device) {
  return time_once(
      [&] {
        for (int i = first; i < first + count; ++i) engine.train_step(batches[i]);
        engine.finish_epoch();
      },
      device);
}

// `after` minus `before` for the counters that accumulate (the window's share).
PartitionBench window(const PartitionStats& before, const PartitionStats& after, double wall) {
  PartitionBench p;
  p.stats = after;
  p.stats.forwards -= before.forwards;
  p.stats.backwards -= before.backwards;
  p.stats.updates -= before.updates;
  p.stats.skipped -= before.skipped;
  p.stats.busy_s -= before.busy_s;
  p.stats.busy_cpu_s -= before.busy_cpu_s;
  p.stats.wait_s -= before.wait_s;
  p.stats.send_s -= before.send_s;
  p.idle_s = std::max(0.0, wall - p.stats.busy_s - p.stats.send_s);
  return p;
}

double rate(const ModelInput& in, int steps, double wall) {
  return wall > 0 ? static_cast<double>(in.batch_size) * steps / wall : 0;
}

}  // namespace

PipelineBenchResult run_pipeline_bench(const PipelineBenchOptions& o) {
  o.input.validate();
  o.pipeline.validate();
  ECH_CHECK(o.steps >= 1, "bench pipeline: steps must be >= 1 (got ", o.steps, ")");
  ECH_CHECK(o.warmup >= 0, "bench pipeline: warmup must be >= 0 (got ", o.warmup, ")");
  const std::vector<data::Batch> batches = o.input.make_batches(o.device, o.warmup + o.steps);
  PipelineBenchResult r;
  r.input = o.input;
  r.device = o.device;
  r.steps = o.steps;
  {
    PipelineOptions pipeline = o.pipeline;
    pipeline.timed_ops = true;  // busy = device time on CUDA (each op waits for its stream)
    PipelineEngine engine(o.input.make_model(), bench_sgd_options(), o.device, pipeline);
    if (o.warmup > 0) run_steps(engine, batches, 0, o.warmup, o.device);
    const std::vector<PartitionStats> before = engine.partition_stats();
    r.wall_s = run_steps(engine, batches, o.warmup, o.steps, o.device);
    const std::vector<PartitionStats> after = engine.partition_stats();
    for (size_t k = 0; k < after.size(); ++k)
      r.partitions.push_back(
          window(k < before.size() ? before[k] : PartitionStats{}, after[k], r.wall_s));
    r.engine = engine.name();
    r.cuts = engine.cuts();
    r.engine_report = engine.report();
  }
  std::unique_ptr<StepEngine> single =
      make_single_device_engine(o.input.make_model(), bench_sgd_options(), o.device);
  if (o.warmup > 0) run_steps(*single, batches, 0, o.warmup, o.device);
  r.single_wall_s = run_steps(*single, batches, o.warmup, o.steps, o.device);
  r.images_per_s = rate(o.input, o.steps, r.wall_s);
  r.single_images_per_s = rate(o.input, o.steps, r.single_wall_s);
  return r;
}

namespace {

json::Value input_json(const ModelInput& in) {
  json::Value shape = json::Value::array();
  for (const int64_t d : in.image_shape()) shape.push(d);
  return json::Value::object()
      .set("model", in.model)
      .set("batch_size", in.batch_size)
      .set("input_shape", std::move(shape))
      .set("classes", in.classes);
}

}  // namespace

json::Value ModelBenchResult::to_json() const {
  json::Value list = json::Value::array();
  for (const LayerBench& l : layers)
    list.push(json::Value::object()
                  .set("index", l.index)
                  .set("layer", l.layer)
                  .set("forward", l.profile.forward_time.to_json())
                  .set("backward", l.profile.backward_time.to_json())
                  .set("activation_bytes", static_cast<int64_t>(l.profile.activation_bytes))
                  .set("cost_ms", l.cost_s * 1e3)
                  .set("share", l.share));
  return json::Value::object()
      .set("benchmark", "model")
      .set("input", input_json(input))
      .set("device", device.to_string())
      .set("threads", threads)
      .set("step", step.to_json())
      .set("images_per_s", images_per_s)
      .set("split_blocks", split_blocks)
      .set("layers_total_ms", layers_total_s * 1e3)
      .set("pieces_total_ms", pieces_total_s * 1e3)
      .set("layers", std::move(list));
}

json::Value PipelineBenchResult::to_json() const {
  json::Value list = json::Value::array();
  for (const PartitionBench& p : partitions) {
    const PartitionStats& s = p.stats;
    list.push(
        json::Value::object()
            .set("partition", s.partition)
            .set("layers", json::Array{json::Value(s.layers.begin), json::Value(s.layers.end)})
            .set("device", s.device)
            .set("busy_s", s.busy_s)
            .set("idle_s", p.idle_s)
            .set("bubble_s", s.wait_s)
            .set("transfer_s", s.send_s)
            .set("utilisation", wall_s > 0 ? s.busy_s / wall_s : 0.0)
            .set("forwards", s.forwards)
            .set("backwards", s.backwards)
            .set("peak_activation_bytes", static_cast<int64_t>(s.peak_bytes)));
  }
  return json::Value::object()
      .set("benchmark", "pipeline")
      .set("input", input_json(input))
      .set("device", device.to_string())
      .set("engine", engine)
      .set("ppv", format_ppv(cuts))
      .set("steps", steps)
      .set("wall_s", wall_s)
      .set("images_per_s", images_per_s)
      .set("single_wall_s", single_wall_s)
      .set("single_images_per_s", single_images_per_s)
      .set("speedup_vs_single", speedup())
      .set("partitions", std::move(list))
      .set("engine_report", engine_report);
}

}  // namespace echelon::parallel
