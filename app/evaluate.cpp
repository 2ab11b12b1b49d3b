// Evaluation: the mean loss and accuracy of a model over a data set (after every epoch of a run,
// and `echelon eval` of a checkpoint).
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <echelon/app/checkpoint.h>
#include <echelon/app/flags.h>
#include <echelon/app/train.h>
#include <echelon/autograd/grad_mode.h>
#include <echelon/base/error.h>
#include <echelon/layers/loss.h>
#include <echelon/layers/optim.h>
#include <echelon/tensor/ops.h>

namespace echelon::app {

namespace {

// Mean loss and accuracy over the batches `next` yields until it returns nullopt.
template <typename NextBatch>
EvalResult evaluate_batches(StepEngine& engine, NextBatch&& next) {
  EvalResult result;
  double loss_sum = 0;
  int64_t correct = 0;
  while (auto batch = next()) {
    const Tensor logits = engine.predict(batch->images);  // (B, classes)
    NoGradGuard no_grad;
    Tensor log_probs;
    const Tensor labels = batch->labels.device() == logits.device()
                              ? batch->labels
                              : batch->labels.to(logits.device());
    const double loss = ops::cross_entropy(logits, labels, &log_probs).item<float>();
    const int64_t n = batch->images.size(0);
    loss_sum += loss * static_cast<double>(n);
    correct += correct_count(logits, labels);
    result.samples += n;
  }
  if (result.samples > 0) {
    result.loss = loss_sum / static_cast<double>(result.samples);
    result.accuracy = static_cast<double>(correct) / static_cast<double>(result.samples);
  }
  return result;
}

}  // namespace

EvalResult evaluate(StepEngine& engine, std::shared_ptr<const data::Dataset> dataset,
                    const data::AugmentOptions& augment, int64_t batch_size, int workers,
                    Device device) {
  data::LoaderOptions l;
  l.batch_size = batch_size;
  l.shuffle = false;
  l.workers = workers;
  l.augment = augment;
  l.device = device;
  data::Loader loader(std::move(dataset), l);
  loader.start_epoch(0);
  return evaluate_batches(engine, [&] { return loader.next(); });
}

EvalResult evaluate(StepEngine& engine, data::ResidentData& test) {
  test.start_epoch(0);
  return evaluate_batches(engine, [&] { return test.next(); });
}

namespace {
// The CPU threads of this evaluation, put back as they were afterwards. As in train()
// (run_setup::ScopedRunSettings): --threads N sizes the pool, and --threads 0 keeps its size;
// either way OpenBLAS runs single-threaded, as during the run's own evaluations, so eval reproduces
// a run's test loss bit for bit (a threaded OpenBLAS GEMM can round its last bit differently).
class ScopedCpuThreads {
 public:
  explicit ScopedCpuThreads(int threads) : previous_(ops::cpu_threads()) {
    ops::set_cpu_threads(threads > 0 ? threads : std::max(1, previous_));
  }
  ~ScopedCpuThreads() {
    if (previous_ > 0)
      ops::set_cpu_threads(previous_);
    else
      ops::reset_cpu_threads();
  }
  ScopedCpuThreads(const ScopedCpuThreads&) = delete;
  ScopedCpuThreads& operator=(const ScopedCpuThreads&) = delete;

 private:
  int previous_;
};

// --checkpoint names a file, or a run folder (what `train --out` wrote): its last epoch's
// checkpoint.safetensors, as `train --resume FOLDER` takes the folder.
std::string checkpoint_file(const std::string& given) {
  std::error_code error;
  if (!std::filesystem::is_directory(given, error)) return given;
  const std::filesystem::path last = std::filesystem::path(given) / "checkpoint.safetensors";
  ECH_CHECK(std::filesystem::exists(last, error), given,
            ": is a directory without checkpoint.safetensors (give a run folder or a "
            ".safetensors file)");
  return last.string();
}
}  // namespace

EvalResult evaluate_checkpoint(const EvalOptions& options, std::ostream& out) {
  ECH_CHECK(!options.checkpoint.empty(), "--checkpoint FILE is required");
  ECH_CHECK(options.batch_size >= 1, "--batch-size must be >= 1 (got ", options.batch_size, ")");
  ECH_CHECK(options.limit_test >= 0, "--limit-test must be >= 0 (got ", options.limit_test, ")");
  ECH_CHECK(
      (options.workers >= 0 && options.workers <= kMaxWorkers) || options.workers == kAutoWorkers,
      "--workers must be auto or in 0..", kMaxWorkers, " (0: inline; got ", options.workers, ")");
  ECH_CHECK(options.threads >= 0 && options.threads <= kMaxThreads, "--threads must be in 0..",
            kMaxThreads, " (got ", options.threads, ")");
  const Device device = resolve_device(options.device);
  const ScopedCpuThreads threads(options.threads);
  const std::string path = checkpoint_file(options.checkpoint);
  const LoadedCheckpoint checkpoint = load_checkpoint(path);
  auto model = restore_model(checkpoint, path);

  // Only the test split is read (no train/ needed), labelled as the model was trained: an image
  // folder's test classes map to the checkpoint's class names.
  const std::string dataset = options.data.empty() ? checkpoint.info.dataset : options.data;
  const std::string dir = options.data.empty() && options.data_dir.empty()
                              ? checkpoint.info.data_dir
                              : options.data_dir;
  const std::vector<std::string>& names = data::dataset_names();
  if (!options.data.empty() && std::find(names.begin(), names.end(), options.data) == names.end())
    parse_flag("--data", [&] { data::load_dataset(options.data, "", {}); });  // lists the known
  ECH_CHECK(dataset != "folder" || !dir.empty(),
            "--data folder needs --data-dir DIR (the folder "
            "holding test/CLASS/ images)");
  data::DatasetLimits limits{.test = options.limit_test, .test_only = true};
  if (dataset == checkpoint.info.dataset) limits.class_names = checkpoint.info.class_names;
  // An image folder is resized (and centre-cropped) as in training: the model's input size.
  const json::Value* resize = checkpoint.info.config.find("resize");
  if (dataset == "folder" && resize != nullptr && resize->is_number())
    limits.resize = resize->as_int();
  const DataBundle data = data::load_dataset(dataset, dir, limits);
  ECH_CHECK(checkpoint.info.image_size == 0 || data.image_size == checkpoint.info.image_size, path,
            ": model takes ", checkpoint.info.image_size, "x", checkpoint.info.image_size,
            " images, dataset ", data.name, " has ", data.image_size, "x", data.image_size);
  // A test split may lack the last classes (fewer outputs seen), never have more.
  ECH_CHECK(data.channels == checkpoint.info.in_channels &&
                data.num_classes <= checkpoint.info.num_classes,
            path, ": model expects ", checkpoint.info.in_channels, " channels and ",
            checkpoint.info.num_classes, " classes, dataset ", data.name, " has ", data.channels,
            " and ", data.num_classes);

  const bool averaged =
      !options.live_weights && load_averages(*model, checkpoint.optimizer_state) > 0;
  auto engine = parallel::make_single_device_engine(model, SGDOptions{}, device);
  const WorkersChoice workers = resolve_workers(options.workers, data.test.get(), "1", device);
  const EvalResult r =
      evaluate(*engine, data.test, data.test_augment, options.batch_size, workers.workers, device);
  out << "eval " << checkpoint.info.model << " (epoch " << checkpoint.info.epoch
      << (averaged ? ", moving average of the weights" : "") << ") on " << data.name << " test ("
      << r.samples << " images): loss " << r.loss << ", accuracy " << format_percent(r.accuracy)
      << "\n";
  return r;
}

}  // namespace echelon::app
