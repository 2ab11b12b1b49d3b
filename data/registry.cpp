#include <echelon/data/registry.h>

#include <filesystem>
#include <future>
#include <optional>
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
  bool in_memory() const override { return inner_->in_memory(); }
  RawRecord read(int64_t index) const override {
    ECH_CHECK(index >= 0 && index < size_, name(), ": index ", index, " out of range [0, ", size_,
              ")");
    return inner_->read(index);
  }
  Image decode(const RawRecord& record) const override { return inner_->decode(record); }
  void prefetch(int64_t index) const override {
    if (index >= 0 && index < size_) inner_->prefetch(index);
  }
  // Forwarded so that a --limit-train run keeps the inner set's fused decode + augment stage.
  bool fuses_decode_augment(const AugmentOptions& augment) const override {
    return inner_->fuses_decode_augment(augment);
  }
  void decode_augment(const RawRecord& record, const AugmentOptions& augment, const AugmentKey& key,
                      std::vector<float>& out, int64_t& height, int64_t& width) const override {
    inner_->decode_augment(record, augment, key, out, height, width);
  }
  bool reads_into() const override { return inner_->reads_into(); }
  int64_t read_into(int64_t index, const AugmentOptions& augment, const AugmentKey& key, float* out,
                    int64_t out_size) const override {
    ECH_CHECK(index >= 0 && index < size_, name(), ": index ", index, " out of range [0, ", size_,
              ")");
    return inner_->read_into(index, augment, key, out, out_size);
  }

 private:
  std::shared_ptr<Dataset> inner_;
  int64_t size_;
};

// Per-dataset pixel statistics in [0, 1] units (as in the torchvision examples).
void normalize(DatasetSplits& d, std::vector<float> mean, std::vector<float> std) {
  d.train_augment.mean = d.test_augment.mean = std::move(mean);
  d.train_augment.std = d.test_augment.std = std::move(std);
}

const std::vector<std::string> kFashionMnistClasses = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
const std::vector<std::string> kDigitClasses = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
const std::vector<std::string> kCifar10Classes = {
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"};

// An image folder's splits: root/train/<class>/... and root/test/<class>/..., labelled by the
// training split's classes (or the given ones), so both splits agree on every label.
void open_image_folder(DatasetSplits& d, const std::string& dir, const DatasetLimits& limits) {
  ECH_CHECK(!dir.empty(), "dataset 'folder' needs a directory (with train/ and test/)");
  d.dir = dir;
  const std::filesystem::path root(dir);
  // A typo in --data-dir, or a file given for it: say that, not "missing train/".
  std::error_code error;
  ECH_CHECK(std::filesystem::exists(root, error), "image folder dataset '", dir,
            "': no such folder (give the folder holding train/CLASS/ and test/CLASS/ images)");
  ECH_CHECK(std::filesystem::is_directory(root, error), "image folder dataset '", dir,
            "': is a file, not a folder (give the folder holding train/ and test/)");
  for (const char* split : {"train", "test"}) {
    if (limits.test_only && std::string(split) == "train") continue;
    ECH_CHECK(std::filesystem::is_directory(root / split), "image folder dataset '", dir,
              "' needs subfolders ", limits.test_only ? "" : "train/ and ", "test/ (missing ",
              split, "/)");
  }
  d.class_names = !limits.class_names.empty() ? limits.class_names
                  : limits.test_only          ? image_folder_classes((root / "test").string())
                                              : image_folder_classes((root / "train").string());
  // shape_only (a later pipeline partition's process): the training split's class names are
  // enough; the test split gives the image size (it must equal the training one anyway).
  if (!limits.test_only && !limits.shape_only)
    d.train = make_image_folder_dataset((root / "train").string(), 3, d.class_names, limits.resize);
  d.test = make_image_folder_dataset((root / "test").string(), 3, d.class_names, limits.resize);
  if (limits.resize > 0) {  // Resize + RandomCrop for training, Resize + CenterCrop for test
    d.train_augment.crop_to = d.test_augment.crop_to = limits.resize;
    d.train_augment.random_crop = true;
  }
}

// A missing data set folder is the usual first error: say where the files come from.
void require_folder(const std::string& name, const std::string& dir) {
  if (std::filesystem::is_directory(dir)) return;
  const char* where =
      name == "fashion-mnist" ? "Debian packages it: apt-get install dataset-fashion-mnist"
      : name == "mnist"
          ? "put train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
            "t10k-labels-idx1-ubyte (or the same names with .gz) there"
          : "put the binary version's data_batch_1.bin .. data_batch_5.bin and test_batch.bin "
            "(cifar-10-binary.tar.gz, https://www.cs.toronto.edu/~kriz/cifar.html) there";
  ECH_FAIL(name, ": no folder '", dir, "'; ", where,
           ", or pass --data-dir (--data synthetic needs no files)");
}

// DatasetLimits::shape_only: a fixed-size data set's example shape {C, H, W} and classes.
void shape_only(DatasetSplits& d, const Shape& shape, int64_t classes) {
  d.channels = shape[0];
  d.image_size = shape[1];
  d.num_classes = classes;
}

// The test split (and the training split when `train`) of a data set held in memory: the two
// are read and decompressed at once, the test split on a second thread (start-up is part of
// every run's wall clock, issue #10's time to accuracy). An error of either is rethrown here.
template <typename Load>
void load_splits(DatasetSplits& d, const std::string& name, bool train, const Load& load) {
  std::future<LabeledImages> test = std::async(std::launch::async, [&] { return load("test"); });
  std::optional<LabeledImages> train_set;
  try {
    if (train) train_set = load("train");
  } catch (...) {
    test.wait();  // `load` and `d` must outlive the thread
    throw;
  }
  d.test = make_memory_dataset(test.get(), name);
  if (train_set) d.train = make_memory_dataset(std::move(*train_set), name);
}

void open_splits(DatasetSplits& d, const std::string& name, const std::string& dir,
                 const DatasetLimits& limits) {
  const bool train = !limits.test_only;
  if (name == "fashion-mnist" || name == "mnist") {
    d.dir = !dir.empty() ? dir : name == "mnist" ? kDefaultMnistDir : kDefaultFashionMnistDir;
    d.class_names = name == "mnist" ? kDigitClasses : kFashionMnistClasses;
    if (name == "mnist")
      normalize(d, {0.1307f}, {0.3081f});
    else
      normalize(d, {0.2860f}, {0.3530f});
    if (limits.shape_only) return shape_only(d, {1, 28, 28}, 10);
    require_folder(name, d.dir);
    load_splits(d, name, train,
                [&](const std::string& split) { return load_fashion_mnist(d.dir, split); });
  } else if (name == "cifar10") {
    d.dir = !dir.empty() ? dir : kDefaultCifar10Dir;
    d.class_names = kCifar10Classes;
    normalize(d, {0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f});
    d.train_augment.crop_padding = 4;  // the standard CIFAR augmentation
    d.train_augment.horizontal_flip = true;
    if (limits.shape_only) return shape_only(d, {3, 32, 32}, 10);
    require_folder(name, d.dir);
    load_splits(d, name, train,
                [&](const std::string& split) { return load_cifar10(d.dir, split); });
  } else if (name == "synthetic") {
    ECH_CHECK(dir.empty(), "synthetic: generated in memory, there is no folder to read; drop ",
              "--data-dir ", dir);
    d.dir = dir;
    SyntheticOptions s;
    s.channels = 1;
    s.height = s.width = 28;
    for (int64_t c = 0; c < s.num_classes; ++c) d.class_names.push_back(std::to_string(c));
    if (limits.shape_only) return shape_only(d, {s.channels, s.height, s.width}, s.num_classes);
    s.size = limits.train > 0 ? limits.train : 4096;
    if (train) d.train = make_synthetic_dataset(s);
    s.size = limits.test > 0 ? limits.test : 1024;
    d.test = make_synthetic_dataset(s);
  } else if (name == "folder") {
    open_image_folder(d, dir, limits);
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

DatasetSplits load_dataset(const std::string& name, const std::string& dir,
                           const DatasetLimits& limits) {
  ECH_CHECK(limits.resize >= 0, "resize must be >= 0 (got ", limits.resize, ")");
  ECH_CHECK(limits.resize == 0 || name == "folder", name,
            ": resize applies to image folders only (the data set's images have one size)");
  DatasetSplits d;
  d.name = name;
  open_splits(d, name, dir, limits);
  if (limits.shape_only && !d.test) return d;  // a fixed-size data set: nothing opened
  if (d.train) d.train = take_prefix(d.train, limits.train);
  d.test = take_prefix(d.test, limits.test);
  Shape shape = (d.train ? d.train : d.test)->image_shape();  // {C, H, W}
  if (limits.resize > 0) {
    shape = {shape[0], limits.resize, limits.resize};  // what the crop makes of every image
  } else {
    // The folder is named: the user can look at the files (found by fuzz_idx's eval path).
    ECH_CHECK(
        shape.size() == 3 && shape[1] > 0 && shape[1] == shape[2], name, " in '", d.dir,
        "': images must be square and of one size for the model zoo, got {C, H, W} = ", shape,
        name == "folder" ? " (a folder of mixed sizes trains with a resize: --resize N)" : "");
    ECH_CHECK(d.test->image_shape() == shape, name, " in '", d.dir, "': test images ",
              d.test->image_shape(), " differ from training images ", shape);
  }
  d.channels = shape[0];
  d.image_size = shape[1];
  d.num_classes = (d.train ? d.train : d.test)->num_classes();
  return d;
}

}  // namespace echelon::data
