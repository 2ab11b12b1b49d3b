// The loader's fused decode + augment stage (Dataset::decode_augment) against the separate decode
// and augment stages: the same batches, bit for bit, at every echo placement it applies to; and
// no fusion where echo sits between decode and augment.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <echelon/data/image_codec.h>
#include <echelon/data/loader.h>
#include <echelon/data/transforms.h>

#include "tests/support/temp_dir.h"

using namespace echelon;
using namespace echelon::data;
namespace fs = std::filesystem;
using echelon::test::temp_dir;

namespace {

// root/{a,b}/ with 14 x 18 JPEGs (and one PNG, which takes the three steps inside the fused
// stage), pixels varying per image so every example is recognisable.
fs::path write_jpeg_folder(const std::string& name) {
  const fs::path root = temp_dir(name);
  int n = 0;
  for (const char* label : {"a", "b"}) {
    fs::create_directories(root / label);
    for (int i = 0; i < 11; ++i, ++n) {
      Image image{14, 18, 3, std::vector<uint8_t>(14 * 18 * 3)};
      for (size_t p = 0; p < image.pixels.size(); ++p)
        image.pixels[p] = static_cast<uint8_t>((p * 7 + static_cast<size_t>(n) * 29) % 251);
      const fs::path file = root / label / ("img" + std::to_string(i));
      if (n == 5)
        write_file(file.string() + ".png", encode_png(image));
      else
        write_file(file.string() + ".jpg", encode_jpeg(image, 85));
    }
  }
  return root;
}

struct Epoch {
  std::vector<std::vector<float>> images;  // per batch: (B, C, H, W) flattened
  std::vector<std::vector<int64_t>> labels;
  std::vector<std::string> stages;
};

Epoch run_epoch(const std::shared_ptr<Dataset>& dataset, const LoaderOptions& options) {
  Loader loader(dataset, options);
  loader.start_epoch(1);
  Epoch epoch;
  while (auto batch = loader.next()) {
    epoch.images.push_back(batch->images.to_vector<float>());
    epoch.labels.push_back(batch->labels.to_vector<int64_t>());
  }
  for (const LoaderStageStats& stage : loader.stats().stages) epoch.stages.push_back(stage.name);
  return epoch;
}

bool has_stage(const Epoch& epoch, const std::string& name) {
  return std::find(epoch.stages.begin(), epoch.stages.end(), name) != epoch.stages.end();
}

// One epoch with decode and augment fused, one with them separate (the same options otherwise):
// the same batches, at least `min_batches` of them, and a separate augment stage in the second.
std::pair<Epoch, Epoch> fused_and_separate(const std::shared_ptr<Dataset>& dataset,
                                           LoaderOptions options, size_t min_batches) {
  options.fuse_decode_augment = true;
  Epoch fused = run_epoch(dataset, options);
  options.fuse_decode_augment = false;
  Epoch separate = run_epoch(dataset, options);
  CHECK_FALSE(has_stage(separate, "decode+augment"));
  CHECK(has_stage(separate, "augment"));
  REQUIRE(fused.images.size() >= min_batches);
  CHECK(fused.labels == separate.labels);
  CHECK(fused.images == separate.images);
  return {std::move(fused), std::move(separate)};
}

LoaderOptions training_options() {
  LoaderOptions options;
  options.batch_size = 5;
  options.workers = 1;  // one worker per stage: a deterministic order, so batches compare
  options.seed = 42;
  options.shuffle_buffer = 4;
  options.augment.crop_padding = 3;
  options.augment.horizontal_flip = true;
  options.augment.mean = {0.4f, 0.5f, 0.6f};
  options.augment.std = {0.2f, 0.25f, 0.3f};
  return options;
}

}  // namespace

TEST_SUITE("concurrency_loader_fused") {
  TEST_CASE("fused decode + augment gives the separate stages' batches bit for bit") {
    if (!have_stb()) return;  // the test folder needs the encoders
    const fs::path root = write_jpeg_folder("loader_fused");
    for (const int channels : {3, 1}) {
      CAPTURE(channels);
      const auto dataset = make_image_folder_dataset(root.string(), channels);
      LoaderOptions options = training_options();
      if (channels == 1) options.augment.mean = {0.5f}, options.augment.std = {0.25f};
      struct Placement {
        const char* name;
        double factor;
        EchoPlacement at;
      };
      for (const Placement& p : {Placement{"none", 1.0, EchoPlacement::AfterAugment},
                                 Placement{"after-augment", 2.0, EchoPlacement::AfterAugment},
                                 Placement{"batch", 1.5, EchoPlacement::Batch}}) {
        CAPTURE(p.name);
        options.echo_factor = p.factor;
        options.echo_at = p.at;
        // 22 examples in batches of 5, echoed
        const Epoch fused = fused_and_separate(dataset, options, 5).first;
        CHECK(has_stage(fused, "decode+augment") == have_turbojpeg());
      }
    }
  }

  TEST_CASE("an in-memory data set runs decode + augment as one stage, same batches") {
    LabeledImages set;
    set.images = Tensor::empty({23, 3, 9, 7}, kUInt8);
    uint8_t* pixels = set.images.data<uint8_t>();
    for (int64_t i = 0; i < set.images.numel(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 251);
    set.labels = Tensor::empty({23}, kInt64);
    for (int64_t i = 0; i < 23; ++i) set.labels.data<int64_t>()[i] = i % 4;
    set.num_classes = 4;
    const auto dataset = make_memory_dataset(set, "memory");
    // Crop and flip take the three steps inside the fused stage; without them the bytes go
    // straight to floats (MemoryDataset::decode_augment): both must match the separate stages.
    for (const int recipe : {0, 1, 2}) {
      CAPTURE(recipe);
      for (const int workers : {1, 0}) {
        CAPTURE(workers);
        LoaderOptions options = training_options();
        options.workers = workers;
        if (recipe > 0) options.augment.crop_padding = 0, options.augment.horizontal_flip = false;
        if (recipe == 2) options.augment.mean.clear(), options.augment.std.clear();
        const Epoch fused = fused_and_separate(dataset, options, 4).first;  // 23 in batches of 5
        CHECK(has_stage(fused, "decode+augment"));
        CHECK_FALSE(has_stage(fused, "augment"));
      }
    }
  }

  TEST_CASE("an in-memory data set's direct decode + augment: the three steps' floats, checks") {
    LabeledImages set;
    set.images = Tensor::empty({3, 2, 5, 4}, kUInt8);
    uint8_t* pixels = set.images.data<uint8_t>();
    for (int64_t i = 0; i < set.images.numel(); ++i) pixels[i] = static_cast<uint8_t>(i * 53 % 256);
    set.labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 0}, {3});
    set.num_classes = 2;
    const auto dataset = make_memory_dataset(set, "mem");
    AugmentOptions augment;
    augment.mean = {0.3f, 0.6f};
    augment.std = {0.2f, 0.4f};
    const RawRecord record = dataset->read(2);
    std::vector<float> direct, expected(2 * 5 * 4);
    int64_t height = 0, width = 0;
    dataset->decode_augment(record, augment, {1, 0, 2, 0}, direct, height, width);
    to_float(dataset->decode(record), augment, expected.data());
    CHECK(height == 5);
    CHECK(width == 4);
    CHECK(direct == expected);
    // The channels' coefficients differ: a plane mix-up would show.
    CHECK(direct[0] != expected[20]);
    RawRecord short_record = record;
    short_record.bytes.pop_back();
    CHECK_THROWS_WITH_AS(
        dataset->decode_augment(short_record, augment, {1, 0, 2, 0}, direct, height, width),
        doctest::Contains("mem[2]: record has 39 bytes, expected 40"), Error);
    augment.std = {0.2f, 0.0f};
    CHECK_THROWS_WITH_AS(
        dataset->decode_augment(record, augment, {1, 0, 2, 0}, direct, height, width),
        doctest::Contains("std of channel 1"), Error);
  }

  TEST_CASE("echo before augmentation repeats the decoded image, augmented afresh per copy") {
    if (!have_stb()) return;
    const fs::path root = write_jpeg_folder("loader_fused_before");
    const auto dataset = make_image_folder_dataset(root.string(), 3);
    LoaderOptions options = training_options();
    options.shuffle = false;  // examples in index order, each copy right after the previous
    options.shuffle_buffer = 0;
    options.batch_size = 44;  // the whole epoch (22 examples x 2) in one batch
    options.echo_factor = 2;
    options.echo_at = EchoPlacement::BeforeAugment;
    const Epoch epoch = run_epoch(dataset, options);
    CHECK_FALSE(has_stage(epoch, "decode+augment"));  // never fused here
    REQUIRE(epoch.images.size() == 1);
    const size_t item = 3 * 14 * 18;
    REQUIRE(epoch.images[0].size() == 44 * item);
    int differing_pairs = 0;
    for (int64_t index = 0; index < 22; ++index) {
      const Image decoded = dataset->decode(dataset->read(index));
      std::vector<float> copies[2];
      for (int64_t copy = 0; copy < 2; ++copy) {
        // What the loader must yield: the one decoded image, augmented with the copy's own key.
        const Image augmented = augment_image(decoded, options.augment, {42, 1, index, copy});
        std::vector<float> expected(item);
        to_float(augmented, options.augment, expected.data());
        const auto at = epoch.images[0].begin() + (2 * index + copy) * static_cast<int64_t>(item);
        copies[copy].assign(at, at + static_cast<int64_t>(item));
        CHECK(copies[copy] == expected);
      }
      differing_pairs += copies[0] != copies[1];
    }
    CHECK(differing_pairs >= 16);  // 49 crops x 2 flips: equal draws for both copies are rare
  }
}
