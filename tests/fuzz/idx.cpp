// IDX reader (Fashion-MNIST / MNIST), as `echelon train|eval --data fashion-mnist|mnist --data-dir
// DIR` reads it: load_fashion_mnist(DIR, split) on DIR/<split>-images-idx3-ubyte[.gz] and
// DIR/<split>-labels-idx1-ubyte[.gz], raw or gzip (single or multi-member; read_file detects the
// magic, and a ".gz" file wins over the plain one). Input: images file, kSeparator, labels file,
// and optionally kSeparator and an options byte (absent: split "train", plain names):
//   bit 0  split t10k (the test files) instead of train
//   bit 1  the images file is named *.gz       bit 2  the labels file is named *.gz
//   bit 3  through data::load_dataset with test_only (what `echelon eval` does), limits from
//          the byte after (0: none), dataset mnist when bit 4 is set, fashion-mnist otherwise
//   bit 5  split spelled "test" (an alias of t10k) when bit 0 is set
#include "fuzz_common.h"

#include <echelon/data/dataset.h>
#include <echelon/data/registry.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 3);
  const uint8_t options = parts.size() > 2 && !parts[2].empty() ? parts[2][0] : 0;
  const int64_t limit = parts.size() > 2 && parts[2].size() > 1 ? uint8_t(parts[2][1]) : 0;
  const bool via_registry = options & 8;
  const std::string split = via_registry || (options & 1) ? "t10k" : "train";
  const std::string dir = fuzz::scratch_dir().string();
  // Files of an earlier input must not be picked up (a .gz name wins over the plain one).
  for (const char* s : {"train", "t10k"})
    for (const char* kind : {"-images-idx3-ubyte", "-labels-idx1-ubyte"})
      for (const char* gz : {"", ".gz"})
        std::filesystem::remove(fuzz::scratch_dir() / (std::string(s) + kind + gz));
  fuzz::write_scratch(split + "-images-idx3-ubyte" + (options & 2 ? ".gz" : ""), parts[0]);
  fuzz::write_scratch(split + "-labels-idx1-ubyte" + (options & 4 ? ".gz" : ""),
                      parts.size() > 1 ? parts[1] : std::string());
  fuzz::expect_parse_or_error(dir, [&] {
    ed::LabeledImages set;
    int64_t n = 0;
    if (via_registry) {
      const ed::DatasetSplits splits = ed::load_dataset(options & 16 ? "mnist" : "fashion-mnist",
                                                        dir, {.test = limit, .test_only = true});
      if (splits.train != nullptr || splits.test == nullptr) fuzz::finding("test_only split wrong");
      n = splits.test->size();
      if (limit > 0 && n > limit) fuzz::finding("--limit-test not applied");
      for (int64_t i = 0; i < n; ++i) {
        const ed::RawRecord record = splits.test->read(i);
        if (record.label < 0 || record.label >= splits.num_classes)
          fuzz::finding("label out of range accepted");
      }
      return;
    }
    set = ed::load_fashion_mnist(dir, options & 1 && options & 32 ? "test" : split);
    // What a loaded set promises the trainer: N images (N, 1, H, W), N labels in [0, classes).
    n = set.images.size(0);
    if (set.labels.size(0) != n) fuzz::finding("image and label counts differ");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = set.labels.data<int64_t>()[i];
      if (label < 0 || label >= set.num_classes) fuzz::finding("label out of range accepted");
    }
  });
  return 0;
}
