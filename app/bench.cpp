#include <echelon/app/bench.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/registry.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

namespace echelon::app {

namespace {

// Resolves --device and applies --threads; checks --json can be written before the run.
Device prepare(const BenchCommon& common) {
  ECH_CHECK(common.threads >= 0, "--threads must be >= 0 (got ", common.threads, ")");
  if (common.threads > 0) ops::set_cpu_threads(common.threads);
  if (!common.json_path.empty()) {
    std::ofstream probe(common.json_path, std::ios::app);
    ECH_CHECK(probe.good(), "--json: cannot write '", common.json_path, "'");
  }
  return resolve_device(common.device);
}

void check_rounds(int warmup, int repeats, const char* repeats_flag) {
  ECH_CHECK(warmup >= 0, "--warmup must be >= 0 (got ", warmup, ")");
  ECH_CHECK(repeats >= 1, repeats_flag, " must be >= 1 (got ", repeats, ")");
}

void check_input(const parallel::ModelInput& in) {
  ECH_CHECK(in.batch_size >= 1, "--batch-size must be >= 1 (got ", in.batch_size, ")");
  ECH_CHECK(in.channels >= 0, "--channels must be >= 1 (got ", in.channels, ")");
  ECH_CHECK(in.image_size >= 0, "--image-size must be >= 1 (got ", in.image_size, ")");
  ECH_CHECK(in.classes >= 2, "--classes must be >= 2 (got ", in.classes, ")");
}

json::Value finish(const BenchCommon& common, json::Value result) {
  if (!common.json_path.empty()) {
    std::ofstream file(common.json_path, std::ios::trunc);
    file << result.dump(2) << "\n";
    ECH_CHECK(file.good(), "--json: cannot write '", common.json_path, "'");
  }
  return result;
}

// The consumer of `bench loader`: a training step of `model` or a sleep of `step_ms`.
std::function<void(const data::Batch&)> loader_consumer(const LoaderBenchSpec& spec,
                                                        const data::DatasetSplits& data,
                                                        Device device) {
  ECH_CHECK(spec.step_ms >= 0, "--step-ms must be >= 0 (got ", spec.step_ms, ")");
  if (!spec.model.empty()) {
    auto model = make_model(spec.model, data.channels, data.num_classes, 0, data.image_size);
    std::shared_ptr<parallel::StepEngine> engine =
        parallel::make_single_device_engine(model, parallel::bench_sgd_options(), device);
    return [engine](const data::Batch& batch) { engine->train_step(batch); };
  }
  if (spec.step_ms <= 0) return {};
  const auto pause = std::chrono::duration<double, std::milli>(spec.step_ms);
  return [pause](const data::Batch&) { std::this_thread::sleep_for(pause); };
}

}  // namespace

json::Value bench_op(const BenchCommon& common, parallel::OpBenchOptions options,
                     std::ostream& out) {
  check_rounds(options.warmup, options.repeats, "--repeats");
  options.device = prepare(common);
  const parallel::OpBenchResult r = parallel::run_op_bench(options);
  print_op_table(r, out);
  return finish(common, r.to_json());
}

json::Value bench_model(const BenchCommon& common, parallel::ModelBenchOptions options,
                        std::ostream& out) {
  check_rounds(options.warmup, options.repeats, "--repeats");
  check_input(options.input);
  options.device = prepare(common);
  const parallel::ModelBenchResult r = parallel::run_model_bench(options);
  print_model_table(r, out);
  return finish(common, r.to_json());
}

json::Value bench_pipeline(const BenchCommon& common, parallel::PipelineBenchOptions options,
                           std::ostream& out) {
  check_rounds(options.warmup, options.steps, "--steps");
  check_input(options.input);
  options.device = prepare(common);
  const parallel::PipelineBenchResult r = parallel::run_pipeline_bench(options);
  print_pipeline_table(r, out);
  return finish(common, r.to_json());
}

json::Value bench_loader(const BenchCommon& common, LoaderBenchSpec spec, std::ostream& out) {
  ECH_CHECK(spec.options.max_batches >= 0, "--batches must be >= 0 (got ", spec.options.max_batches,
            ")");
  ECH_CHECK(spec.limit >= 0, "--limit must be >= 0 (got ", spec.limit, ")");
  const Device device = prepare(common);
  const data::DatasetSplits data = data::load_dataset(spec.data, spec.data_dir, {spec.limit, 1});
  data::LoaderOptions& loader = spec.options.loader;
  loader.set_echo(spec.echo);
  loader.echo_at = data::parse_echo_placement(spec.echo_at);
  loader.augment = data.train_augment;
  loader.device = device;
  spec.options.consume = loader_consumer(spec, data, device);
  const parallel::LoaderBenchResult r = parallel::run_loader_bench(data.train, spec.options);
  print_loader_table(r, out);
  return finish(common, r.to_json().set("data", data.name).set("device", device.to_string()));
}

}  // namespace echelon::app
