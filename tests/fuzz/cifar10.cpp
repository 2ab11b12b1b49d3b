// CIFAR-10 binary reader, as `echelon train|eval --data cifar10 --data-dir DIR` reads it:
// load_cifar10_files over the batch files (train: data_batch_1..5.bin), and load_cifar10(DIR,
// "test") through data::load_dataset with test_only (what `echelon eval` runs) on test_batch.bin.
// Input: up to 3 files separated by kSeparator; the first is also the test batch. A limit for
// the test split comes from the last byte of the input (0: none).
#include "fuzz_common.h"

#include <echelon/data/dataset.h>
#include <echelon/data/registry.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 3);
  std::vector<std::string> paths;
  for (size_t i = 0; i < parts.size(); ++i)
    paths.push_back(fuzz::write_scratch("data_batch_" + std::to_string(i + 1) + ".bin", parts[i]));
  const std::string dir = fuzz::scratch_dir().string();
  fuzz::expect_parse_or_error(dir, [&] {
    const ed::LabeledImages set = ed::load_cifar10_files(paths);
    const int64_t n = set.images.size(0);
    if (set.labels.size(0) != n || set.images.size(1) != 3) fuzz::finding("inconsistent set");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = set.labels.data<int64_t>()[i];
      if (label < 0 || label >= set.num_classes) fuzz::finding("label out of range accepted");
    }
  });
  fuzz::write_scratch("test_batch.bin", parts[0]);
  const int64_t limit = size > 0 ? data[size - 1] % 8 : 0;
  fuzz::expect_parse_or_error(dir, [&] {
    const ed::DatasetSplits splits =
        ed::load_dataset("cifar10", dir, {.test = limit, .test_only = true});
    if (splits.train != nullptr || splits.channels != 3 || splits.image_size != 32)
      fuzz::finding("inconsistent test split");
    if (limit > 0 && splits.test->size() > limit) fuzz::finding("--limit-test not applied");
  });
  return 0;
}
