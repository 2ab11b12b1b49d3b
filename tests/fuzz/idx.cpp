// IDX reader (Fashion-MNIST / MNIST), as `echelon train --data fashion-mnist --data-dir DIR` reads
// it: load_fashion_mnist(DIR, "train") on DIR/train-images-idx3-ubyte and
// DIR/train-labels-idx1-ubyte, raw or gzip (single or multi-member; read_file detects the magic).
// Input: images file, kSeparator, labels file.
#include "fuzz_common.h"

#include <echelon/data/dataset.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 2);
  const std::string dir = fuzz::scratch_dir().string();
  fuzz::write_scratch("train-images-idx3-ubyte", parts[0]);
  fuzz::write_scratch("train-labels-idx1-ubyte", parts.size() > 1 ? parts[1] : std::string());
  fuzz::expect_parse_or_error(dir, [&] {
    const echelon::data::LabeledImages set = echelon::data::load_fashion_mnist(dir, "train");
    // What a loaded set promises the trainer: N images (N, 1, H, W), N labels in [0, classes).
    const int64_t n = set.images.size(0);
    if (set.labels.size(0) != n) fuzz::finding("image and label counts differ");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = set.labels.data<int64_t>()[i];
      if (label < 0 || label >= set.num_classes) fuzz::finding("label out of range accepted");
    }
  });
  return 0;
}
