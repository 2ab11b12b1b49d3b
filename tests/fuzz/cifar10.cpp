// CIFAR-10 binary reader, as `echelon train --data cifar10 --data-dir DIR` reads it
// (load_cifar10_files over the batch files). Input: up to 3 files separated by kSeparator.
#include "fuzz_common.h"

#include <echelon/data/dataset.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  const std::vector<std::string> parts = fuzz::split_parts(data, size, 3);
  std::vector<std::string> paths;
  for (size_t i = 0; i < parts.size(); ++i)
    paths.push_back(fuzz::write_scratch("data_batch_" + std::to_string(i + 1) + ".bin", parts[i]));
  fuzz::expect_parse_or_error(fuzz::scratch_dir().string(), [&] {
    const echelon::data::LabeledImages set = echelon::data::load_cifar10_files(paths);
    const int64_t n = set.images.size(0);
    if (set.labels.size(0) != n || set.images.size(1) != 3) fuzz::finding("inconsistent set");
    for (int64_t i = 0; i < n; ++i) {
      const int64_t label = set.labels.data<int64_t>()[i];
      if (label < 0 || label >= set.num_classes) fuzz::finding("label out of range accepted");
    }
  });
  return 0;
}
