#include <echelon/app/checkpoint.h>

#include <bit>
#include <cctype>
#include <fstream>

#include <echelon/base/error.h>
#include <echelon/layers/init.h>
#include <echelon/layers/models/registry.h>
#include <echelon/tensor/safetensors.h>

namespace echelon::app {

namespace {

constexpr const char* kOptimizerPrefix = "optimizer.";
constexpr int64_t kMaxInChannels = 64;
constexpr int64_t kMaxClasses = 100'000;
constexpr int64_t kMaxImageSize = 256;
constexpr const char* kTrainerPrefix = "trainer.";

Tensor int64_scalar(int64_t value) {
  return Tensor::from_vector(std::vector<int64_t>{value}, Shape{});
}

json::Value class_names_json(const std::vector<std::string>& names) {
  json::Value list = json::Value::array();
  for (const std::string& name : names) list.push(name);
  return list;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

const std::string& meta_at(const safetensors::Metadata& meta, const std::string& key,
                           const std::string& path) {
  const auto it = meta.find(key);
  ECH_CHECK(it != meta.end(), path, ": checkpoint metadata lacks \"", key, "\"");
  return it->second;
}

int64_t meta_int(const safetensors::Metadata& meta, const std::string& key,
                 const std::string& path) {
  const std::string& text = meta_at(meta, key, path);
  try {
    size_t used = 0;
    const long long value = std::stoll(text, &used);
    ECH_CHECK(used == text.size(), "trailing characters");
    return value;
  } catch (const std::exception&) {
    ECH_FAIL(path, ": checkpoint metadata \"", key, "\" is not an integer: \"", text, "\"");
  }
}

json::Value meta_json(const safetensors::Metadata& meta, const std::string& key,
                      const std::string& path) {
  return json::parse(meta_at(meta, key, path), path + " (metadata \"" + key + "\")");
}

}  // namespace

void save_checkpoint(const std::string& path, const Sequential& model,
                     const StateDict& optimizer_state, const CheckpointInfo& info) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : model.state_dict()) tensors.emplace_back(name, tensor);
  for (const auto& [name, tensor] : optimizer_state)
    tensors.emplace_back(kOptimizerPrefix + name, tensor);
  tensors.emplace_back("trainer.epoch", int64_scalar(info.epoch));
  tensors.emplace_back("trainer.global_step", int64_scalar(info.global_step));
  tensors.emplace_back("trainer.seed", int64_scalar(std::bit_cast<int64_t>(info.seed)));

  json::Value history = json::Value::array();
  for (const EpochRecord& record : info.history) history.push(record.to_json());
  json::Value steps = json::Value::array();
  for (const StepPoint& p : info.steps)
    steps.push(json::Array{json::Value(p.global_step), json::Value(p.epoch), json::Value(p.loss)});

  const safetensors::Metadata meta = {
      {"format", kCheckpointFormat},
      {"model", info.model},
      {"dataset", info.dataset},
      {"data_dir", info.data_dir},
      {"in_channels", std::to_string(info.in_channels)},
      {"num_classes", std::to_string(info.num_classes)},
      {"image_size", std::to_string(info.image_size)},
      {"epoch", std::to_string(info.epoch)},
      {"global_step", std::to_string(info.global_step)},
      {"seed", std::to_string(info.seed)},
      {"wall_s", json::Value(info.wall_s).dump()},
      {"config", info.config.dump()},
      {"history", history.dump()},
      {"history_epoch_base", "1"},
      {"class_names", class_names_json(info.class_names).dump()},
      {"steps", steps.dump()},
  };
  safetensors::save(path, tensors, meta);
}

namespace {

// The training history (per-epoch records and the step curve) stored as JSON metadata.
void read_history(const safetensors::Metadata& meta, const std::string& path,
                  CheckpointInfo& info) {
  try {
    // Named locals: a range-for over a temporary's member would dangle.
    const json::Value history = meta_json(meta, "history", path);
    const json::Value steps = meta_json(meta, "steps", path);
    const int64_t epoch_base = meta.count("history_epoch_base") ? 1 : 0;
    for (const json::Value& v : history.as_array())
      info.history.push_back(EpochRecord::from_json(v, epoch_base));
    for (const json::Value& v : steps.as_array()) {
      const json::Array& p = v.as_array();
      ECH_CHECK(p.size() == 3, "a step point has ", p.size(), " entries, expected 3");
      info.steps.push_back({p[0].as_int(), p[1].as_double(), p[2].as_double()});
    }
  } catch (const Error& e) {
    if (starts_with(e.message(), path)) throw;
    ECH_FAIL(path, ": bad training history in the metadata: ", e.message());
  }
}

CheckpointInfo read_info(const safetensors::Metadata& meta, const std::string& path) {
  CheckpointInfo info;
  info.model = meta_at(meta, "model", path);
  info.dataset = meta_at(meta, "dataset", path);
  info.data_dir = meta_at(meta, "data_dir", path);
  info.in_channels = meta_int(meta, "in_channels", path);
  info.num_classes = meta_int(meta, "num_classes", path);
  info.image_size = meta_int(meta, "image_size", path);
  info.epoch = meta_int(meta, "epoch", path);
  info.global_step = meta_int(meta, "global_step", path);
  const std::string& seed_text = meta_at(meta, "seed", path);
  try {
    info.seed = std::stoull(seed_text);
  } catch (const std::exception&) {
    ECH_FAIL(path, ": checkpoint metadata \"seed\" is not an integer: \"", seed_text, "\"");
  }
  info.wall_s = meta_json(meta, "wall_s", path).as_double();
  info.config = meta_json(meta, "config", path);
  read_history(meta, path, info);
  if (meta.count("class_names")) {
    try {
      const json::Value names = meta_json(meta, "class_names", path);  // named: see read_history
      for (const json::Value& name : names.as_array()) info.class_names.push_back(name.as_string());
    } catch (const Error& e) {
      ECH_FAIL(path, ": checkpoint metadata \"class_names\": ", e.message());
    }
    ECH_CHECK(info.class_names.empty() ||
                  static_cast<int64_t>(info.class_names.size()) >= info.num_classes,
              path, ": checkpoint metadata names ", info.class_names.size(), " classes for ",
              info.num_classes, " model outputs");
  }
  // Bounded before anything is built from them: a damaged num_classes (1e12) must not become an
  // allocation. The zoo's models are CIFAR/MNIST-scale (image_size 0 = the model's default).
  ECH_CHECK(
      info.in_channels >= 1 && info.in_channels <= kMaxInChannels && info.num_classes >= 1 &&
          info.num_classes <= kMaxClasses && info.epoch >= 0 && info.global_step >= 0 &&
          (info.image_size == 0 || (info.image_size >= 1 && info.image_size <= kMaxImageSize)),
      path, ": checkpoint metadata has impossible values (in_channels ", info.in_channels,
      " of 1..", kMaxInChannels, ", num_classes ", info.num_classes, " of 1..", kMaxClasses,
      ", image_size ", info.image_size, " of 0..", kMaxImageSize, ", epoch ", info.epoch,
      ", global_step ", info.global_step, ")");
  ECH_CHECK(static_cast<int64_t>(info.history.size()) == info.epoch, path, ": metadata records ",
            info.history.size(), " epochs of history but epoch = ", info.epoch);
  return info;
}

}  // namespace

namespace {
// A safetensors file starts with its header length, an 8-byte little-endian integer whose high
// bytes are 0; config.json, metrics.jsonl or summary.json start with printable text.
bool starts_with_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  if (!in.read(head, sizeof(head))) return false;
  for (const char c : head)
    if (!std::isprint(static_cast<unsigned char>(c)) &&
        !std::isspace(static_cast<unsigned char>(c)))
      return false;
  return true;
}

safetensors::Contents load_contents(const std::string& path) {
  try {
    return safetensors::load(path);
  } catch (const Error&) {
    // Else "header length 7237123119542962811 runs past the end": say what the file is instead.
    ECH_CHECK(!starts_with_text(path), path,
              ": is a text file (JSON?), not a .safetensors checkpoint; give the run folder or "
              "its checkpoint.safetensors");
    throw;
  }
}
}  // namespace

LoadedCheckpoint load_checkpoint(const std::string& path) {
  const safetensors::Contents contents = load_contents(path);
  const auto& meta = contents.metadata;
  const auto format = meta.find("format");
  ECH_CHECK(format != meta.end() && format->second == kCheckpointFormat, path,
            ": not an echelon checkpoint (metadata \"format\" is not \"", kCheckpointFormat, "\")");

  LoadedCheckpoint loaded;
  loaded.info = read_info(meta, path);
  for (const auto& [name, tensor] : contents.tensors) {
    if (starts_with(name, kOptimizerPrefix))
      loaded.optimizer_state.insert(name.substr(std::string(kOptimizerPrefix).size()), tensor);
    else if (!starts_with(name, kTrainerPrefix))
      loaded.model_state.insert(name, tensor);
  }
  const Tensor* epoch_tensor = contents.find("trainer.epoch");
  ECH_CHECK(
      epoch_tensor != nullptr && epoch_tensor->dtype() == kInt64 && epoch_tensor->numel() == 1,
      path, ": checkpoint lacks the int64 scalar tensor \"trainer.epoch\"");
  const int64_t saved_epoch = epoch_tensor->item<int64_t>();
  ECH_CHECK(saved_epoch == loaded.info.epoch, path, ": tensor trainer.epoch = ", saved_epoch,
            " disagrees with the metadata epoch ", loaded.info.epoch);
  return loaded;
}

std::shared_ptr<Sequential> restore_model(const LoadedCheckpoint& checkpoint,
                                          const std::string& path,
                                          const std::string& expected_model) {
  const CheckpointInfo& info = checkpoint.info;
  ECH_CHECK(expected_model.empty() || expected_model == info.model, path,
            ": checkpoint holds model \"", info.model, "\", not \"", expected_model, "\"");
  // Before building (allocating) the model: the tensors must be able to hold it. Every zoo model
  // ends with a Linear classifier (num_classes, K) and starts with a convolution
  // (O, in_channels, kh, kw); a file whose metadata disagrees is refused without allocating.
  const Tensor* classifier = nullptr;
  const Tensor* first_conv = nullptr;
  for (const auto& item : checkpoint.model_state) {
    const Tensor& t = item.second;
    if (t.dim() == 2) classifier = &t;
    if (t.dim() == 4 && first_conv == nullptr) first_conv = &t;
  }
  ECH_CHECK(classifier != nullptr && classifier->size(0) == info.num_classes, path,
            ": metadata num_classes ", info.num_classes, " does not match the classifier weight ",
            classifier ? classifier->shape() : Shape{}, " in the file");
  ECH_CHECK(first_conv != nullptr && first_conv->size(1) == info.in_channels, path,
            ": metadata in_channels ", info.in_channels, " does not match the first convolution ",
            first_conv ? first_conv->shape() : Shape{}, " in the file");
  std::shared_ptr<Sequential> model;
  try {
    // The strict load below overwrites every parameter: drawing them first would be wasted time.
    const init::SkipGuard skip_init;
    model = make_model(info.model, info.in_channels, info.num_classes, info.seed, info.image_size);
  } catch (const Error& e) {
    ECH_FAIL(path, ": the metadata describes no model we can build: ", e.what());
  }
  try {
    model->load_state_dict(checkpoint.model_state, /*strict=*/true);
  } catch (const Error& e) {
    ECH_FAIL(path, ": weights do not fit model \"", info.model, "\": ", e.message());
  }
  return model;
}

}  // namespace echelon::app
