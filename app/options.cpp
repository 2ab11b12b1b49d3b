// TrainOptions: JSON round trip (config.json), validation with flag-named errors, device
// resolution, and the datasets a run trains and evaluates on.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <echelon/base/error.h>
#include <echelon/data/loader.h>
#include <echelon/layers/models/registry.h>
#include <echelon/parallel/schedule.h>
#include <echelon/app/train.h>

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
      .set("schedule", schedule)
      .set("warmup-epochs", warmup_epochs)
      .set("step-size", step_size)
      .set("milestones", std::move(milestone_list))
      .set("gamma", gamma)
      .set("device", device)
      .set("conv-impl", conv_impl)
      .set("seed", seed)
      .set("threads", threads)
      .set("out", out)
      .set("deterministic", deterministic)
      .set("limit-train", limit_train)
      .set("limit-test", limit_test)
      .set("echo", echo)
      .set("echo-at", echo_at)
      .set("shuffle-buffer", shuffle_buffer)
      .set("workers", workers)
      .set("log-every", log_every);
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
      ECH_FAIL("config key \"", key, "\": ", e.what());
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
  with("seed", [&](const json::Value& f) { o.seed = static_cast<uint64_t>(f.as_int()); });
  with("threads", [&](const json::Value& f) { o.threads = static_cast<int>(f.as_int()); });
  with("out", [&](const json::Value& f) { o.out = f.as_string(); });
  with("deterministic", [&](const json::Value& f) { o.deterministic = f.as_bool(); });
  with("limit-train", [&](const json::Value& f) { o.limit_train = f.as_int(); });
  with("limit-test", [&](const json::Value& f) { o.limit_test = f.as_int(); });
  with("echo", [&](const json::Value& f) { o.echo = f.as_string(); });
  with("echo-at", [&](const json::Value& f) { o.echo_at = f.as_string(); });
  with("shuffle-buffer", [&](const json::Value& f) { o.shuffle_buffer = f.as_int(); });
  with("workers", [&](const json::Value& f) { o.workers = static_cast<int>(f.as_int()); });
  with("log-every", [&](const json::Value& f) { o.log_every = f.as_int(); });
  return o;
}

namespace {

const std::vector<std::string> kDatasets = {"fashion-mnist", "mnist", "cifar10", "synthetic",
                                            "folder"};
const std::vector<std::string> kSchedules = {"constant", "step", "multistep", "cosine"};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

bool one_of(const std::string& value, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

// Drops the " [file.cpp:123]" tag of a nested error so the flag-named message stays one line.
std::string detail(const Error& e) {
  std::string message = e.what();
  const size_t tag = message.rfind(" [");
  if (tag != std::string::npos && !message.empty() && message.back() == ']') message.resize(tag);
  return message;
}

}  // namespace

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
  for (const ModelInfo& m : models) model_names.push_back(m.name);
  ECH_CHECK(one_of(o.model, model_names), "--model: unknown model \"", o.model,
            "\" (known: ", join(model_names), ")");
  ECH_CHECK(one_of(o.data, kDatasets), "--data: unknown dataset \"", o.data,
            "\" (known: ", join(kDatasets), ")");
  ECH_CHECK(o.data != "folder" || !o.data_dir.empty(), "--data folder needs --data-dir DIR");
  ECH_CHECK(o.epochs >= 1, "--epochs must be >= 1 (got ", o.epochs, ")");
  ECH_CHECK(o.batch_size >= 1, "--batch-size must be >= 1 (got ", o.batch_size, ")");
  ECH_CHECK(std::isfinite(o.lr) && o.lr > 0, "--lr must be a number > 0 (got ", o.lr, ")");
  ECH_CHECK(std::isfinite(o.momentum) && o.momentum >= 0 && o.momentum < 1,
            "--momentum must be in [0, 1) (got ", o.momentum, ")");
  ECH_CHECK(!o.nesterov || o.momentum > 0, "--nesterov needs --momentum > 0");
  ECH_CHECK(std::isfinite(o.wd) && o.wd >= 0, "--wd must be >= 0 (got ", o.wd, ")");
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
  resolve_device(o.device);
  ECH_CHECK(o.conv_impl == "ours" || o.conv_impl == "cudnn", "--conv-impl: unknown value \"",
            o.conv_impl, "\" (known: ours, cudnn)");
  ECH_CHECK(o.threads >= 0, "--threads must be >= 0 (got ", o.threads, ")");
  ECH_CHECK(o.limit_train >= 0, "--limit-train must be >= 0 (got ", o.limit_train, ")");
  ECH_CHECK(o.limit_test >= 0, "--limit-test must be >= 0 (got ", o.limit_test, ")");
  ECH_CHECK(o.workers >= 1, "--workers must be >= 1 (got ", o.workers, ")");
  ECH_CHECK(o.shuffle_buffer >= 0, "--shuffle-buffer must be >= 0 (got ", o.shuffle_buffer, ")");
  ECH_CHECK(o.log_every >= 0, "--log-every must be >= 0 (got ", o.log_every, ")");
  ECH_CHECK(one_of(o.progress, {"auto", "bar", "lines", "none"}), "--progress: unknown value \"",
            o.progress, "\" (known: auto, bar, lines, none)");
  ECH_CHECK(o.stop_after_epoch >= 0, "--stop-after-epoch must be >= 0");
  data::LoaderOptions loader;
  try {
    loader.set_echo(o.echo);
  } catch (const Error& e) {
    ECH_FAIL("--echo: ", detail(e));
  }
  try {
    data::parse_echo_placement(o.echo_at);
  } catch (const Error& e) {
    ECH_FAIL("--echo-at: ", detail(e));
  }
  // The auto factor follows measured timings, and several workers per stage may reorder
  // examples: both differ from run to run.
  ECH_CHECK(!(o.deterministic && loader.echo_auto),
            "--deterministic cannot be combined with --echo auto (timing-dependent)");
  ECH_CHECK(!(o.deterministic && o.workers > 1), "--deterministic needs --workers 1 (got ",
            o.workers, "): several workers per stage may reorder examples");
}

namespace {

// The first `limit` examples of another dataset.
class PrefixDataset : public data::Dataset {
 public:
  PrefixDataset(std::shared_ptr<data::Dataset> inner, int64_t limit)
      : inner_(std::move(inner)), size_(std::min(limit, inner_->size())) {}
  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return inner_->num_classes(); }
  Shape image_shape() const override { return inner_->image_shape(); }
  std::string name() const override { return inner_->name(); }
  data::RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size_, name(), ": index ", index, " out of range [0, ", size_,
              ")");
    return inner_->read(index);
  }
  data::Image decode(const data::RawRecord& record) const override {
    return inner_->decode(record);
  }

 private:
  std::shared_ptr<data::Dataset> inner_;
  int64_t size_;
};

std::shared_ptr<data::Dataset> limit(std::shared_ptr<data::Dataset> dataset, int64_t n) {
  if (n <= 0 || n >= dataset->size()) return dataset;
  return std::make_shared<PrefixDataset>(std::move(dataset), n);
}

}  // namespace

DataBundle load_data(const TrainOptions& o) {
  DataBundle b;
  b.name = o.data;
  b.dir = o.data_dir;
  if (o.data == "fashion-mnist" || o.data == "mnist") {
    if (b.dir.empty())
      b.dir = o.data == "mnist" ? "/usr/share/datasets/mnist" : data::kDefaultFashionMnistDir;
    b.train = data::make_memory_dataset(data::load_fashion_mnist(b.dir, "train"), o.data);
    b.test = data::make_memory_dataset(data::load_fashion_mnist(b.dir, "t10k"), o.data);
    // Per-dataset pixel statistics (as in the torchvision examples).
    const float mean = o.data == "mnist" ? 0.1307f : 0.2860f;
    const float std = o.data == "mnist" ? 0.3081f : 0.3530f;
    b.train_augment.mean = b.test_augment.mean = {mean};
    b.train_augment.std = b.test_augment.std = {std};
  } else if (o.data == "cifar10") {
    if (b.dir.empty()) b.dir = "/usr/share/datasets/cifar10";
    b.train = data::make_memory_dataset(data::load_cifar10(b.dir, "train"), o.data);
    b.test = data::make_memory_dataset(data::load_cifar10(b.dir, "test"), o.data);
    b.train_augment.mean = b.test_augment.mean = {0.4914f, 0.4822f, 0.4465f};
    b.train_augment.std = b.test_augment.std = {0.2470f, 0.2435f, 0.2616f};
    b.train_augment.crop_padding = 4;  // the standard CIFAR augmentation
    b.train_augment.horizontal_flip = true;
  } else if (o.data == "synthetic") {
    data::SyntheticOptions s;
    s.channels = 1;
    s.height = s.width = 28;
    s.size = o.limit_train > 0 ? o.limit_train : 4096;
    b.train = data::make_synthetic_dataset(s);
    s.size = o.limit_test > 0 ? o.limit_test : 1024;
    b.test = data::make_synthetic_dataset(s);
  } else if (o.data == "folder") {
    const std::filesystem::path root(o.data_dir);
    for (const char* split : {"train", "test"})
      ECH_CHECK(std::filesystem::is_directory(root / split), "--data-dir ", o.data_dir,
                ": an image folder dataset needs subfolders train/ and test/ (missing ", split,
                "/)");
    b.train = data::make_image_folder_dataset((root / "train").string(), 3);
    b.test = data::make_image_folder_dataset((root / "test").string(), 3);
  } else {
    ECH_FAIL("--data: unknown dataset \"", o.data, "\"");
  }
  b.train = limit(b.train, o.limit_train);
  b.test = limit(b.test, o.limit_test);
  const Shape shape = b.train->image_shape();  // {C, H, W}
  ECH_CHECK(shape.size() == 3 && shape[1] > 0 && shape[1] == shape[2], b.name,
            ": images must be square and of one size for the model zoo, got {C, H, W} = ", shape);
  ECH_CHECK(b.test->image_shape() == shape, b.name, ": test images ", b.test->image_shape(),
            " differ from training images ", shape);
  b.channels = shape[0];
  b.image_size = shape[1];
  b.num_classes = b.train->num_classes();
  return b;
}

}  // namespace echelon::app
