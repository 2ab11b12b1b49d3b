// The data sets a run can name, each with its files, its normalisation constants and its default
// augmentation: the one place that knows "cifar10" means 32x32 RGB, mean (0.4914, ...), random crop
// and flip. The trainer asks for a data set by name; it never opens dataset files itself.
//
//   data::DatasetSplits data = data::load_dataset("fashion-mnist", "", {.train = 1000});
//   data::LoaderOptions options;  options.augment = data.train_augment;
//   data::Loader loader(data.train, options);
//
// Adding a data set: a loader in datasets.cpp (or a Dataset class), then its branch in
// open_splits() and its name in dataset_names() (registry.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <echelon/data/dataset.h>
#include <echelon/data/transforms.h>

namespace echelon::data {

// "fashion-mnist", "mnist", "cifar10", "synthetic", "folder".
const std::vector<std::string>& dataset_names();

// How many examples of each split to use; 0 = all. For "synthetic" they are the split sizes
// (0: 4096 train, 1024 test).
struct DatasetLimits {
  int64_t train = 0, test = 0;
  // Only the test split (`echelon eval`): the training files need not exist; train is null.
  bool test_only = false;
  // The label order to use (from a checkpoint); empty: the data set's own. Image folders label
  // by it instead of by their subfolders.
  std::vector<std::string> class_names = {};
  // Image folders only: > 0 brings each image's shorter side to this, then crops resize x resize
  // (at random for training, centred for test), so images of any size and shape train; the
  // model's input is resize x resize. 0: images must be square and of one size.
  int64_t resize = 0;
  // Only the shape of an example, the classes and the normalisation: train and test stay null and
  // no file is opened (a later pipeline partition's process builds its model and loads no data).
  // An image folder still lists its classes and opens its splits (the image size may need a
  // file's header), but a caller that builds no loader decodes no image.
  bool shape_only = false;
};

// A data set's two splits, how to feed them, and the shape of one example.
struct DatasetSplits {
  std::shared_ptr<Dataset> train, test;
  AugmentOptions train_augment, test_augment;  // normalisation (both), augmentation (train)
  int64_t channels = 0, image_size = 0, num_classes = 0;
  std::string name;  // as asked for
  std::string dir;   // where the files were read: `dir`, or the data set's default folder
  std::vector<std::string> class_names;  // label i's name ("T-shirt/top", a folder's subfolder)
};

// Opens data set `name` from `dir` (empty: its default folder; "folder" needs one, with train/ and
// test/ subfolders of class folders), limited by `limits`. Images must be square and of one size
// in both splits, unless limits.resize. Throws echelon::Error naming the data set, the folder or
// the bad file.
DatasetSplits load_dataset(const std::string& name, const std::string& dir,
                           const DatasetLimits& limits = {});

// The first `n` examples of `dataset`; `dataset` itself when n is 0 or not below its size.
std::shared_ptr<Dataset> take_prefix(std::shared_ptr<Dataset> dataset, int64_t n);

}  // namespace echelon::data
