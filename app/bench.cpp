#include <echelon/app/bench.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <echelon/app/flags.h>
#include <echelon/app/run_setup.h>
#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/registry.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/ops.h>

namespace echelon::app {

namespace {

void check_writable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  std::ofstream probe(path, std::ios::app);
  ECH_CHECK(probe.good(), flag, ": cannot write '", path, "'");
}

void write_text(const std::string& path, const char* flag, const std::string& text) {
  if (path.empty()) return;
  std::ofstream file(path, std::ios::trunc);
  file << text;
  ECH_CHECK(file.good(), flag, ": cannot write '", path, "'");
}

// Resolves --device and applies --threads; checks --json and --html can be written first.
Device prepare(const BenchCommon& common) {
  ECH_CHECK(common.threads >= 0 && common.threads <= kMaxThreads, "--threads must be in 0..",
            kMaxThreads, " (got ", common.threads, "; this machine has ",
            std::thread::hardware_concurrency(), " CPU threads)");
  if (common.threads > 0) ops::set_cpu_threads(common.threads);
  check_writable(common.json_path, "--json");
  check_writable(common.html_path, "--html");
  const Device device = resolve_device(common.device);
  ECH_CHECK(!common.autotune || device.is_cuda(),
            "--autotune tunes the CUDA convolutions and this bench runs on ", device.to_string(),
            ": drop --autotune or use --device cuda");
  if (common.autotune) ops::set_conv_autotune(true);
  return device;
}

void check_rounds(int warmup, int repeats, const char* repeats_flag) {
  ECH_CHECK(warmup >= 0, "--warmup must be >= 0 (got ", warmup, ")");
  ECH_CHECK(repeats >= 1, repeats_flag, " must be >= 1 (got ", repeats, ")");
}

// The model's name, checked here so the error says which argument named it.
void check_model(const std::string& model, const char* what) {
  std::string known;
  for (const ModelInfo& m : list_models()) {
    if (m.name == model) return;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  ECH_FAIL(what, ": unknown model '", model, "' (known: ", known, ")");
}

void check_input(const parallel::ModelInput& in, const char* model_flag) {
  check_model(in.model, model_flag);
  ECH_CHECK(in.batch_size >= 1, "--batch-size must be >= 1 (got ", in.batch_size, ")");
  ECH_CHECK(in.channels >= 0, "--channels must be >= 1 (got ", in.channels, ")");
  ECH_CHECK(in.image_size >= 0, "--image-size must be >= 1 (got ", in.image_size, ")");
  ECH_CHECK(in.classes >= 2, "--classes must be >= 2 (got ", in.classes, ")");
}

// Prints the table, writes --json and --html; returns the JSON.
json::Value finish(const BenchCommon& common, json::Value result, const std::string& title,
                   const std::ostringstream& table, const std::vector<BenchChart>& charts,
                   std::ostream& out) {
  out << table.str() << std::flush;
  if (json::Value picks = run_setup::conv_autotune_json(); !picks.is_null())
    result.set("conv_autotune", std::move(picks));
  write_text(common.json_path, "--json", result.dump(2) + "\n");
  write_text(common.html_path, "--html", render_bench_html(title, table.str(), charts));
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
  std::ostringstream table;
  print_op_table(r, table);
  return finish(common, r.to_json(), "echelon bench op " + r.op, table, op_charts(r), out);
}

json::Value bench_model(const BenchCommon& common, parallel::ModelBenchOptions options,
                        std::ostream& out) {
  check_rounds(options.warmup, options.repeats, "--repeats");
  check_input(options.input, "bench model");
  options.device = prepare(common);
  const parallel::ModelBenchResult r = parallel::run_model_bench(options);
  std::ostringstream table;
  print_model_table(r, table);
  return finish(common, r.to_json(), "echelon bench model " + r.input.model, table, model_charts(r),
                out);
}

json::Value bench_pipeline(const BenchCommon& common, parallel::PipelineBenchOptions options,
                           std::ostream& out) {
  check_rounds(options.warmup, options.steps, "--steps");
  check_input(options.input, "--model");
  options.device = prepare(common);
  const parallel::PipelineBenchResult r = parallel::run_pipeline_bench(options);
  std::ostringstream table;
  print_pipeline_table(r, table);
  return finish(common, r.to_json(), "echelon bench pipeline " + r.engine, table,
                pipeline_charts(r), out);
}

json::Value bench_loader(const BenchCommon& common, LoaderBenchSpec spec, std::ostream& out) {
  ECH_CHECK(spec.options.max_batches >= 0, "--batches must be >= 0 (got ", spec.options.max_batches,
            ")");
  ECH_CHECK(spec.limit >= 0, "--limit must be >= 0 (got ", spec.limit, ")");
  const std::vector<std::string>& datasets = data::dataset_names();
  if (std::find(datasets.begin(), datasets.end(), spec.data) == datasets.end())
    parse_flag("--data", [&] { data::load_dataset(spec.data, "", {}); });  // names the known ones
  if (!spec.model.empty()) check_model(spec.model, "--model");
  const Device device = prepare(common);
  const data::DatasetSplits data =
      data::load_dataset(spec.data, spec.data_dir, {.train = spec.limit, .test = 1});
  data::LoaderOptions& loader = spec.options.loader;
  loader.set_echo(spec.echo);
  loader.echo_at = data::parse_echo_placement(spec.echo_at);
  loader.augment = data.train_augment;
  loader.device = device;
  spec.options.consume = loader_consumer(spec, data, device);
  const parallel::LoaderBenchResult r = parallel::run_loader_bench(data.train, spec.options);
  std::ostringstream table;
  print_loader_table(r, table);
  return finish(common, r.to_json().set("data", data.name).set("device", device.to_string()),
                "echelon bench loader " + data.name, table, loader_charts(r), out);
}

}  // namespace echelon::app
