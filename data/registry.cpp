#include <echelon/data/registry.h>

#include <filesystem>
#include <utility>

#include <echelon/base/error.h>

namespace echelon::data {
namespace {

constexpr const char* kDefaultMnistDir = "/usr/share/datasets/mnist";
constexpr const char* kDefaultCifar10Dir = "/usr/share/datasets/cifar10";

// The first `size` examples of another dataset.
class PrefixDataset final : public Dataset {
 public:
  PrefixDataset(std::shared_ptr<Dataset> inner, int64_t size)
      : inner_(std::move(inner)), size_(size) {}
  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return inner_->num_classes(); }
  Shape image_shape() const override { return inner_->image_shape(); }
  std::string name() const override { return inner_->name(); }
  RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size_, name(), ": index ", index, " out of range [0, ", size_,
              ")");
    return inner_->read(index);
  }
  Image decode(const RawRecord& record) const override { return inner_->decode(record); }

 private:
  std::shared_ptr<Dataset> inner_;
  int64_t size_;
};

// Per-dataset pixel statistics in [0, 1] units (as in the torchvision examples).
void normalize(DatasetSplits& d, std::vector<float> mean, std::vector<float> std) {
  d.train_augment.mean = d.test_augment.mean = std::move(mean);
  d.train_augment.std = d.test_augment.std = std::move(std);
}

void open_splits(DatasetSplits& d, const std::string& name, const std::string& dir,
                 const DatasetLimits& limits) {
  if (name == "fashion-mnist" || name == "mnist") {
    d.dir = !dir.empty() ? dir : name == "mnist" ? kDefaultMnistDir : kDefaultFashionMnistDir;
    d.train = make_memory_dataset(load_fashion_mnist(d.dir, "train"), name);
    d.test = make_memory_dataset(load_fashion_mnist(d.dir, "t10k"), name);
    if (name == "mnist")
      normalize(d, {0.1307f}, {0.3081f});
    else
      normalize(d, {0.2860f}, {0.3530f});
  } else if (name == "cifar10") {
    d.dir = !dir.empty() ? dir : kDefaultCifar10Dir;
    d.train = make_memory_dataset(load_cifar10(d.dir, "train"), name);
    d.test = make_memory_dataset(load_cifar10(d.dir, "test"), name);
    normalize(d, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f});
    d.train_augment.crop_padding = 4;  // the standard CIFAR augmentation
    d.train_augment.horizontal_flip = true;
  } else if (name == "synthetic") {
    d.dir = dir;
    SyntheticOptions s;
    s.channels = 1;
    s.height = s.width = 28;
    s.size = limits.train > 0 ? limits.train : 4096;
    d.train = make_synthetic_dataset(s);
    s.size = limits.test > 0 ? limits.test : 1024;
    d.test = make_synthetic_dataset(s);
  } else if (name == "folder") {
    ECH_CHECK(!dir.empty(), "dataset 'folder' needs a directory (with train/ and test/)");
    d.dir = dir;
    const std::filesystem::path root(dir);
    for (const char* split : {"train", "test"})
      ECH_CHECK(std::filesystem::is_directory(root / split), "image folder dataset '", dir,
                "' needs subfolders train/ and test/ (missing ", split, "/)");
    d.train = make_image_folder_dataset((root / "train").string(), 3);
    d.test = make_image_folder_dataset((root / "test").string(), 3);
  } else {
    std::string known;
    for (const std::string& n : dataset_names()) known += (known.empty() ? "" : ", ") + n;
    ECH_FAIL("unknown dataset \"", name, "\" (known: ", known, ")");
  }
}

}  // namespace

const std::vector<std::string>& dataset_names() {
  static const std::vector<std::string> names = {"fashion-mnist", "mnist", "cifar10", "synthetic",
                                                 "folder"};
  return names;
}

std::shared_ptr<Dataset> take_prefix(std::shared_ptr<Dataset> dataset, int64_t n) {
  ECH_CHECK(dataset != nullptr, "take_prefix: dataset is null");
  ECH_CHECK(n >= 0, dataset->name(), ": cannot take the first ", n, " examples");
  if (n == 0 || n >= dataset->size()) return dataset;
  return std::make_shared<PrefixDataset>(std::move(dataset), n);
}

DatasetSplits load_dataset(const std::string& name, const std::string& dir, DatasetLimits limits) {
  DatasetSplits d;
  d.name = name;
  open_splits(d, name, dir, limits);
  d.train = take_prefix(d.train, limits.train);
  d.test = take_prefix(d.test, limits.test);
  const Shape shape = d.train->image_shape();  // {C, H, W}
  ECH_CHECK(shape.size() == 3 && shape[1] > 0 && shape[1] == shape[2], name,
            ": images must be square and of one size for the model zoo, got {C, H, W} = ", shape);
  ECH_CHECK(d.test->image_shape() == shape, name, ": test images ", d.test->image_shape(),
            " differ from training images ", shape);
  d.channels = shape[0];
  d.image_size = shape[1];
  d.num_classes = d.train->num_classes();
  return d;
}

}  // namespace echelon::data
