// TrainOptions: JSON round trip (config.json), validation with flag-named errors, device
// resolution, and the datasets a run trains and evaluates on.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <thread>

#include <echelon/app/flags.h>
#include <echelon/app/train.h>
#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/data/registry.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/schedule.h>

namespace echelon::app {

json::Value TrainOptions::to_json() const {
  json::Value milestone_list = json::Value::array();
  for (const int64_t m : milestones) milestone_list.push(m);
  return json::Value::object()
      .set("model", model)
      .set("data", data)
      .set("data-dir", data_dir)
      .set("epochs", epochs)
      .set("batch-size", batch_size)
      .set("lr", lr)
      .set("momentum", momentum)
      .set("nesterov", nesterov)
      .set("wd", wd)
      .set("ema", ema)
      .set("schedule", schedule)
      .set("warmup-epochs", warmup_epochs)
      .set("step-size", step_size)
      .set("milestones", std::move(milestone_list))
      .set("gamma", gamma)
      .set("device", device)
      .set("conv-impl", conv_impl)
      .set("precision", precision)
      .set("seed", seed)
      .set("threads", threads)
      .set("out", out)
      .set("deterministic", deterministic)
      .set("autotune", autotune)
      .set("fuse", fuse)
      .set("limit-train", limit_train)
      .set("limit-test", limit_test)
      .set("augment", augment)
      .set("resize", resize)
      .set("echo", echo)
      .set("echo-at", echo_at)
      .set("shuffle-buffer", shuffle_buffer)
      .set("workers", workers)
      .set("resident-data", resident_data)
      .set("target-accuracy", target_accuracy)
      .set("log-every", log_every)
      .set("engine", engine);
}

TrainOptions TrainOptions::from_json(const json::Value& v) {
  TrainOptions o;
  ECH_CHECK(v.is_object(), "config: expected a JSON object");
  auto with = [&](const char* key, auto&& assign) {
    const json::Value* field = v.find(key);
    if (!field) return;
    try {
      assign(*field);
    } catch (const Error& e) {
      ECH_FAIL("config key \"", key, "\": ", e.message());
    }
  };
  with("model", [&](const json::Value& f) { o.model = f.as_string(); });
  with("data", [&](const json::Value& f) { o.data = f.as_string(); });
  with("data-dir", [&](const json::Value& f) { o.data_dir = f.as_string(); });
  with("epochs", [&](const json::Value& f) { o.epochs = f.as_int(); });
  with("batch-size", [&](const json::Value& f) { o.batch_size = f.as_int(); });
  with("lr", [&](const json::Value& f) { o.lr = f.as_double(); });
  with("momentum", [&](const json::Value& f) { o.momentum = f.as_double(); });
  with("nesterov", [&](const json::Value& f) { o.nesterov = f.as_bool(); });
  with("wd", [&](const json::Value& f) { o.wd = f.as_double(); });
  with("ema", [&](const json::Value& f) { o.ema = f.as_double(); });
  with("schedule", [&](const json::Value& f) { o.schedule = f.as_string(); });
  with("warmup-epochs", [&](const json::Value& f) { o.warmup_epochs = f.as_double(); });
  with("step-size", [&](const json::Value& f) { o.step_size = f.as_int(); });
  with("milestones", [&](const json::Value& f) {
    o.milestones.clear();
    for (const json::Value& m : f.as_array()) o.milestones.push_back(m.as_int());
  });
  with("gamma", [&](const json::Value& f) { o.gamma = f.as_double(); });
  with("device", [&](const json::Value& f) { o.device = f.as_string(); });
  with("conv-impl", [&](const json::Value& f) { o.conv_impl = f.as_string(); });
  with("precision", [&](const json::Value& f) { o.precision = f.as_string(); });
  with("seed", [&](const json::Value& f) { o.seed = static_cast<uint64_t>(f.as_int()); });
  with("threads", [&](const json::Value& f) { o.threads = static_cast<int>(f.as_int()); });
  with("out", [&](const json::Value& f) { o.out = f.as_string(); });
  with("deterministic", [&](const json::Value& f) { o.deterministic = f.as_bool(); });
  with("autotune", [&](const json::Value& f) { o.autotune = f.as_bool(); });
  with("fuse", [&](const json::Value& f) { o.fuse = f.as_bool(); });
  with("limit-train", [&](const json::Value& f) { o.limit_train = f.as_int(); });
  with("limit-test", [&](const json::Value& f) { o.limit_test = f.as_int(); });
  with("augment", [&](const json::Value& f) { o.augment = f.as_string(); });
  with("resize", [&](const json::Value& f) { o.resize = f.as_int(); });
  with("echo", [&](const json::Value& f) { o.echo = f.as_string(); });
  with("echo-at", [&](const json::Value& f) { o.echo_at = f.as_string(); });
  with("shuffle-buffer", [&](const json::Value& f) { o.shuffle_buffer = f.as_int(); });
  with("workers", [&](const json::Value& f) {
    o.workers = f.is_string() ? parse_workers(f.as_string()) : static_cast<int>(f.as_int());
  });
  with("resident-data", [&](const json::Value& f) { o.resident_data = f.as_bool(); });
  with("target-accuracy", [&](const json::Value& f) { o.target_accuracy = f.as_double(); });
  with("log-every", [&](const json::Value& f) { o.log_every = f.as_int(); });
  with("engine", [&](const json::Value& f) {
    ECH_CHECK(f.is_object(), f.where(), ": expected an object of pipeline flags");
    o.engine = f;
  });
  return o;
}

namespace {

const std::vector<std::string> kSchedules = {"constant", "step", "multistep", "cosine"};

// The largest --resize: a 1024 x 1024 input is far beyond what the zoo's models train on.
constexpr int64_t kMaxResize = 1024;

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

bool one_of(const std::string& value, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

// Another run's folder is never replaced silently: its config, metrics and checkpoint would be
// overwritten piece by piece as the new run goes.
void check_out_folder(const TrainOptions& o) {
  if (o.out.empty()) return;
  namespace fs = std::filesystem;
  std::error_code error;
  // Else create_directories fails only after the data set is loaded, saying "Not a directory".
  ECH_CHECK(!fs::exists(o.out, error) || fs::is_directory(o.out, error), "--out ", o.out,
            ": is a file, not a folder; give a folder for the run's files");
  if (o.overwrite) return;
  if (!fs::exists(fs::path(o.out) / "config.json", error)) return;
  const bool resuming_it = !o.resume.empty() && fs::weakly_canonical(o.resume, error) ==
                                                    fs::weakly_canonical(o.out, error);
  ECH_CHECK(resuming_it, "--out ", o.out, ": already holds a run (config.json); pass --overwrite ",
            "to replace it, or --resume ", o.out, " to continue it");
}

}  // namespace

std::string threads_warning(int threads, unsigned hardware_threads) {
  if (hardware_threads == 0 || threads <= static_cast<int>(hardware_threads) ||
      threads > kMaxThreads)
    return "";
  return str("--threads ", threads, " is more than the ", hardware_threads,
             " CPU threads this machine has: the extra threads share cores and slow each op down "
             "(--threads ",
             hardware_threads, " uses them all)");
}

int parse_workers(const std::string& text) {
  if (text == "auto") return kAutoWorkers;
  size_t used = 0;
  int count = -1;
  try {
    count = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  ECH_CHECK(used == text.size() && count >= 0, "--workers: invalid value \"", text,
            "\" (expected auto, or a count >= 0; 0: inline, on the training thread)");
  return count;
}

WorkersChoice resolve_workers(int requested, const data::Dataset* dataset, const std::string& echo,
                              Device device) {
  if (requested != kAutoWorkers) return {requested, "given"};
  if (echo == "auto") return {1, "auto: --echo auto needs loader threads"};
  if (device.is_cuda()) return {1, "auto: threads overlap the host-to-device copy"};
  if (dataset == nullptr) return {1, "auto: no data set loaded here"};
  if (!dataset->in_memory()) return {1, "auto: threads overlap reading and decoding files"};
  return {0, "auto: in-memory data set"};
}

Device resolve_device(const std::string& text) {
  if (text == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  Device device;
  try {
    device = Device::parse(text);
  } catch (const Error& e) {
    ECH_FAIL("--device: invalid value \"", text, "\" (expected auto, cpu, cuda or cuda:N)");
  }
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    ECH_CHECK(count > 0, "--device ", text, ": no CUDA device is available",
              " (CPU-only build or no GPU); use --device cpu");
    ECH_CHECK(device.index >= 0 && device.index < count, "--device ", text, ": only ", count,
              " CUDA device(s) present");
  }
  return device;
}

void validate(const TrainOptions& o) {
  const std::vector<ModelInfo> models = list_models();
  std::vector<std::string> model_names;
  model_names.reserve(models.size());
  for (const ModelInfo& m : models) model_names.push_back(m.name);
  ECH_CHECK(one_of(o.model, model_names), "--model: unknown model \"", o.model,
            "\" (known: ", join(model_names), ")");
  ECH_CHECK(one_of(o.data, data::dataset_names()), "--data: unknown dataset \"", o.data,
            "\" (known: ", join(data::dataset_names()), ")");
  ECH_CHECK(o.data != "folder" || !o.data_dir.empty(), "--data folder needs --data-dir DIR");
  ECH_CHECK(o.epochs >= 1, "--epochs must be >= 1 (got ", o.epochs, ")");
  ECH_CHECK(o.batch_size >= 1, "--batch-size must be >= 1 (got ", o.batch_size, ")");
  ECH_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a number > 0 (got ", o.lr, ")");
  ECH_CHECK(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1,
            "--momentum must be in [0, 1) (got ", o.momentum, ")");
  ECH_CHECK(!o.nesterov || o.momentum > 0, "--nesterov needs --momentum > 0");
  ECH_CHECK(std::isfinite(o.wd) && o.wd >= 0, "--wd must be >= 0 (got ", o.wd, ")");
  ECH_CHECK(o.ema == 0 || (o.ema > 0 && o.ema < 1),
            "--ema must be 0 (no average) or a decay in (0, 1), e.g. 0.99 (got ", o.ema, ")");
  ECH_CHECK(one_of(o.schedule, kSchedules), "--schedule: unknown schedule \"", o.schedule,
            "\" (LR: ", join(kSchedules), "; pipeline: ", parallel::schedule_names(), ")");
  ECH_CHECK(std::isfinite(o.warmup_epochs) && o.warmup_epochs >= 0,
            "--warmup-epochs must be >= 0 (got ", o.warmup_epochs, ")");
  ECH_CHECK(o.step_size >= 1, "--step-size must be >= 1 (got ", o.step_size, ")");
  ECH_CHECK(std::isfinite(o.gamma) && o.gamma > 0, "--gamma must be > 0 (got ", o.gamma, ")");
  for (size_t i = 0; i < o.milestones.size(); ++i)
    ECH_CHECK(o.milestones[i] >= 0 && (i == 0 || o.milestones[i] > o.milestones[i - 1]),
              "--milestones must be increasing epochs >= 0");
  ECH_CHECK(o.schedule != "multistep" || !o.milestones.empty(),
            "--schedule multistep needs --milestones E1,E2,...");
  const Device device = resolve_device(o.device);
  ECH_CHECK(o.conv_impl == "ours" || o.conv_impl == "cudnn", "--conv-impl: unknown value \"",
            o.conv_impl, "\" (known: ours, cudnn)");
  ECH_CHECK(o.precision == "fp32" || o.precision == "tf32" || o.precision == "bf16",
            "--precision: unknown value \"", o.precision, "\" (known: fp32, tf32, bf16)");
  ECH_CHECK(o.precision == "fp32" || device.is_cuda(), "--precision ", o.precision,
            " applies to CUDA devices and this run is on the CPU (--device ", o.device,
            "), whose ops always compute in fp32; use --precision fp32");
  // cudnn is a CUDA library: on the CPU the flag would be ignored without a word.
  ECH_CHECK(o.conv_impl == "ours" || device.is_cuda(), "--conv-impl ", o.conv_impl,
            " applies to CUDA devices and this run is on the CPU (--device ", o.device,
            "); drop the flag or use --conv-impl ours");
  ECH_CHECK(o.threads >= 0 && o.threads <= kMaxThreads, "--threads must be in 0..", kMaxThreads,
            " (got ", o.threads, "; this machine has ", std::thread::hardware_concurrency(),
            " CPU threads)");
  ECH_CHECK(o.limit_train >= 0, "--limit-train must be >= 0 (got ", o.limit_train, ")");
  ECH_CHECK(o.limit_test >= 0, "--limit-test must be >= 0 (got ", o.limit_test, ")");
  if (o.augment != "default") parse_flag("--augment", [&] { data::parse_augment_spec(o.augment); });
  ECH_CHECK(o.resize >= 0 && o.resize <= kMaxResize, "--resize must be in 0..", kMaxResize,
            " (got ", o.resize, ")");
  ECH_CHECK(o.resize == 0 || o.data == "folder", "--resize applies to --data folder only (", o.data,
            " images all have one size)");
  ECH_CHECK((o.workers >= 0 && o.workers <= kMaxWorkers) || o.workers == kAutoWorkers,
            "--workers must be auto or in 0..", kMaxWorkers,
            " (0: inline, on the training thread; got ", o.workers, ")");
  ECH_CHECK(!(o.workers == 0 && o.echo == "auto"),
            "--echo auto needs loader threads (--workers >= 1): with --workers 0 the data stages "
            "run on the training thread, so there is no upstream rate to match; give a number");
  ECH_CHECK(o.shuffle_buffer >= 0, "--shuffle-buffer must be >= 0 (got ", o.shuffle_buffer, ")");
  ECH_CHECK(std::isfinite(o.target_accuracy) && o.target_accuracy >= 0 && o.target_accuracy <= 1,
            "--target-accuracy must be a fraction in (0, 1], or 0 for none (got ",
            o.target_accuracy,
            o.target_accuracy > 1 && o.target_accuracy <= 100
                ? str("; for ", o.target_accuracy, "% give ", o.target_accuracy / 100)
                : std::string(),
            ")");
  ECH_CHECK(o.log_every >= 0, "--log-every must be >= 0 (got ", o.log_every, ")");
  ECH_CHECK(one_of(o.progress, {"auto", "bar", "lines", "none"}), "--progress: unknown value \"",
            o.progress, "\" (known: auto, bar, lines, none)");
  ECH_CHECK(o.stop_after_epoch >= 0, "--stop-after-epoch must be >= 0 (got ", o.stop_after_epoch,
            ")");
  data::LoaderOptions loader;
  parse_flag("--echo", [&] { loader.set_echo(o.echo); });
  parse_flag("--echo-at", [&] { return data::parse_echo_placement(o.echo_at); });
  // The auto factor follows measured timings, and several workers per stage may reorder
  // examples: both differ from run to run.
  ECH_CHECK(!(o.deterministic && loader.echo_auto),
            "--deterministic cannot be combined with --echo auto (timing-dependent)");
  // The tuner keeps whichever kernel configuration timed fastest, and the weight gradient's
  // split-K group counts change its order of summation.
  ECH_CHECK(!(o.deterministic && o.autotune),
            "--deterministic cannot be combined with --autotune: the tuned kernels depend on "
            "timings, and their weight gradients sum in a different order; drop one of them");
  ECH_CHECK(!o.autotune || device.is_cuda(),
            "--autotune tunes the CUDA convolutions (our kernels, or cuDNN's algorithms with "
            "--conv-impl cudnn); this run has --device ",
            o.device, ": drop --autotune");
  ECH_CHECK(!(o.deterministic && o.workers > 1), "--deterministic needs --workers 1 (got ",
            o.workers, "): several workers per stage may reorder examples");
  if (o.resident_data) {
    // The resident set replaces the loader: its stages, echo and shuffle buffer do not exist.
    ECH_CHECK(o.echo == "1",
              "--resident-data replaces the loader, so it has no echo stage; drop "
              "--echo ",
              o.echo, " (or train without --resident-data)");
    ECH_CHECK(o.shuffle_buffer == 0,
              "--resident-data replaces the loader, so it has no shuffle "
              "buffer; drop --shuffle-buffer ",
              o.shuffle_buffer);
    ECH_CHECK(o.resize == 0, "--resident-data needs images of one size; drop --resize ", o.resize);
  }
  // Only the process that writes the run folder checks it: in a multi-process run rank 0 may
  // already have written config.json when another rank gets here.
  if (o.primary) check_out_folder(o);
}

DataBundle load_data(const TrainOptions& o) {
  DataBundle data = data::load_dataset(o.data, o.data_dir,
                                       {.train = o.limit_train,
                                        .test = o.limit_test,
                                        .resize = o.resize,
                                        .shape_only = !o.loads_data});
  if (o.augment != "default") {
    const data::AugmentRecipe recipe =
        parse_flag("--augment", [&] { return data::parse_augment_spec(o.augment); });
    data.train_augment.crop_padding = recipe.crop_padding;
    data.train_augment.horizontal_flip = recipe.horizontal_flip;
  }
  return data;
}

}  // namespace echelon::app
