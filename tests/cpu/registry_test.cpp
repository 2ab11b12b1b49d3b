// The dataset registry: names, default folders, normalisation constants, default augmentation,
// limits, and the checks on shapes and folders.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/loader.h>
#include <echelon/data/registry.h>

namespace fs = std::filesystem;
using echelon::test::temp_dir;
using namespace echelon;
using namespace echelon::data;

namespace {

// `records` CIFAR-10 records: label i % 10, pixel bytes (i + offset) & 0xFF.
void write_cifar(const fs::path& path, int records) {
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < records; ++i) {
    out.put(static_cast<char>(i % 10));
    for (int b = 0; b < 3072; ++b) out.put(static_cast<char>((i + b) & 0xFF));
  }
}

}  // namespace

TEST_SUITE("dataset_registry") {
  TEST_CASE("names, and an unknown name lists the known ones") {
    CHECK(dataset_names() ==
          std::vector<std::string>{"fashion-mnist", "mnist", "cifar10", "synthetic", "folder"});
    CHECK_THROWS_WITH_AS(load_dataset("imagenet", ""),
                         doctest::Contains("unknown dataset \"imagenet\" (known: fashion-mnist, "
                                           "mnist, cifar10, synthetic, folder)"),
                         Error);
  }

  TEST_CASE("fashion-mnist and mnist: default folder, limits, their own constants") {
    const DatasetSplits f = load_dataset("fashion-mnist", "", {.train = 100, .test = 50});
    CHECK(f.dir == kDefaultFashionMnistDir);
    CHECK(f.name == "fashion-mnist");
    CHECK(f.train->size() == 100);
    CHECK(f.test->size() == 50);
    CHECK(f.channels == 1);
    CHECK(f.image_size == 28);
    CHECK(f.num_classes == 10);
    CHECK(f.train_augment.mean == std::vector<float>{0.2860f});
    CHECK(f.test_augment.std == std::vector<float>{0.3530f});
    CHECK(f.train_augment.crop_padding == 0);
    CHECK_FALSE(f.train_augment.horizontal_flip);
    CHECK(f.train->read(99).label == load_dataset("fashion-mnist", "", {}).train->read(99).label);
    CHECK_THROWS_AS(f.train->read(100), Error);  // the prefix ends at the limit
    // A limited set keeps the in-memory set's properties: inline loading, fused decode + augment.
    CHECK(f.train->in_memory());
    CHECK(f.train->fuses_decode_augment(f.train_augment));
    std::vector<float> fused;
    int64_t height = 0, width = 0;
    f.train->decode_augment(f.train->read(7), f.train_augment, {1, 0, 7, 0}, fused, height, width);
    CHECK(height == 28);
    CHECK(width == 28);
    CHECK(fused.size() == 28 * 28);

    // The MNIST constants, read from the Fashion-MNIST files (same format).
    const DatasetSplits m =
        load_dataset("mnist", kDefaultFashionMnistDir, {.train = 10, .test = 10});
    CHECK(m.train_augment.mean == std::vector<float>{0.1307f});
    CHECK(m.test_augment.std == std::vector<float>{0.3081f});
    CHECK_THROWS_WITH_AS(load_dataset("mnist", temp_dir("no_mnist").string()),
                         doctest::Contains("no_mnist/train-images-idx3-ubyte"), Error);
  }

  TEST_CASE("cifar10: 3 channels, crop and flip for training only, CHW pixels as stored") {
    const fs::path dir = temp_dir("cifar");
    for (int i = 1; i <= 5; ++i) write_cifar(dir / ("data_batch_" + std::to_string(i) + ".bin"), 3);
    write_cifar(dir / "test_batch.bin", 4);
    const DatasetSplits c = load_dataset("cifar10", dir.string(), {.train = 0, .test = 2});
    CHECK(c.train->size() == 15);
    CHECK(c.test->size() == 2);
    CHECK(c.channels == 3);
    CHECK(c.image_size == 32);
    CHECK(c.num_classes == 10);
    CHECK(c.train_augment.mean.size() == 3);
    CHECK(c.train_augment.crop_padding == 4);
    CHECK(c.train_augment.horizontal_flip);
    CHECK(c.test_augment.crop_padding == 0);
    CHECK_FALSE(c.test_augment.horizontal_flip);
    // The record's bytes are (C, H, W) and the decoded image keeps them in that order.
    const Image image = c.test->decode(c.test->read(1));
    CHECK(image.channels == 3);
    for (int b = 0; b < 3072; b += 97) CHECK(image.pixels[b] == ((1 + b) & 0xFF));
    CHECK_THROWS_WITH_AS(load_dataset("cifar10", temp_dir("no_cifar").string()),
                         doctest::Contains("data_batch_1.bin"), Error);
  }

  TEST_CASE("synthetic: the limits are the split sizes") {
    const DatasetSplits s = load_dataset("synthetic", "", {.train = 64, .test = 32});
    CHECK(s.train->size() == 64);
    CHECK(s.test->size() == 32);
    CHECK(s.image_size == 28);
    const DatasetSplits d = load_dataset("synthetic", "", {});
    CHECK(d.train->size() == 4096);
    CHECK(d.test->size() == 1024);
    // A folder would be silently ignored: refused instead.
    CHECK_THROWS_WITH_AS(load_dataset("synthetic", "/data/x", {}),
                         doctest::Contains("drop --data-dir /data/x"), Error);
  }

  TEST_CASE("folder: needs a directory with train/ and test/, square images") {
    CHECK_THROWS_WITH_AS(load_dataset("folder", ""), doctest::Contains("needs a directory"), Error);
    const fs::path dir = temp_dir("folder");
    fs::create_directories(dir / "train" / "a");
    CHECK_THROWS_WITH_AS(load_dataset("folder", dir.string()), doctest::Contains("missing test/"),
                         Error);
    if (!have_stb()) return;
    fs::create_directories(dir / "test" / "a");
    write_file((dir / "train" / "a" / "x.png").string(),
               encode_png({6, 6, 3, std::vector<uint8_t>(108, 9)}));
    write_file((dir / "test" / "a" / "y.png").string(),
               encode_png({6, 6, 3, std::vector<uint8_t>(108, 7)}));
    const DatasetSplits ok = load_dataset("folder", dir.string());
    CHECK(ok.dir == dir.string());
    CHECK(ok.channels == 3);
    CHECK(ok.image_size == 6);
    CHECK(ok.train_augment.mean.empty());  // no known statistics: pixels / 255 only
    write_file((dir / "test" / "a" / "y.png").string(),
               encode_png({4, 4, 3, std::vector<uint8_t>(48, 7)}));
    CHECK_THROWS_WITH_AS(load_dataset("folder", dir.string()),
                         doctest::Contains("test images [3, 4, 4] differ from training images "
                                           "[3, 6, 6]"),
                         Error);
    write_file((dir / "train" / "a" / "x.png").string(),
               encode_png({4, 5, 3, std::vector<uint8_t>(60, 9)}));
    CHECK_THROWS_WITH_AS(load_dataset("folder", dir.string()),
                         doctest::Contains("images must be square"), Error);
  }

  TEST_CASE(
      "folder with resize: mixed, non-square sizes load; random crop to train, centred to test") {
    if (!have_stb()) return;
    const fs::path dir = temp_dir("folder_resize");
    for (const char* split : {"train", "test"})
      for (const char* label : {"cat", "dog"}) fs::create_directories(dir / split / label);
    auto image = [](int64_t h, int64_t w) {
      Image im{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
      for (size_t i = 0; i < im.pixels.size(); ++i) im.pixels[i] = static_cast<uint8_t>(i * 7);
      return im;
    };
    write_file((dir / "train" / "cat" / "a.png").string(), encode_png(image(20, 31)));
    write_file((dir / "train" / "cat" / "b.jpg").string(), encode_jpeg(image(40, 17)));
    write_file((dir / "train" / "dog" / "c.png").string(), encode_png(image(12, 12)));
    write_file((dir / "test" / "dog" / "d.jpg").string(), encode_jpeg(image(33, 50)));
    CHECK_THROWS_WITH_AS(load_dataset("folder", dir.string()),
                         doctest::Contains("a folder of mixed sizes trains with a resize"), Error);
    CHECK_THROWS_WITH_AS(load_dataset("cifar10", "", {.resize = 16}),
                         doctest::Contains("resize applies to image folders only"), Error);
    const DatasetSplits d = load_dataset("folder", dir.string(), {.resize = 16});
    CHECK(d.image_size == 16);
    CHECK(d.channels == 3);
    CHECK(d.train->image_shape() == Shape{3, 0, 0});  // sizes vary until the crop
    CHECK(d.train_augment.crop_to == 16);
    CHECK(d.train_augment.random_crop);
    CHECK(d.test_augment.crop_to == 16);
    CHECK_FALSE(d.test_augment.random_crop);
    const Image b = d.train->decode(d.train->read(1));  // 40x17 -> shorter side 16
    CHECK(b.width == 16);
    CHECK(b.height == 37);  // 40 * 16 / 17 = 37.6, rounded down
    // Through the loader: every batch is (N, 3, 16, 16), from images of four sizes.
    LoaderOptions options;
    options.batch_size = 3;
    options.workers = 1;
    options.augment = d.train_augment;
    Loader loader(d.train, options);
    loader.start_epoch(0);
    int64_t seen = 0;
    while (auto batch = loader.next()) {
      CHECK(batch->images.shape() == Shape{batch->images.size(0), 3, 16, 16});
      seen += batch->images.size(0);
    }
    CHECK(seen == 3);
  }

  TEST_CASE("take_prefix: the first n examples, the same records") {
    SyntheticOptions options;
    options.size = 10;
    const std::shared_ptr<Dataset> all = make_synthetic_dataset(options);
    CHECK(take_prefix(all, 0) == all);
    CHECK(take_prefix(all, 10) == all);
    CHECK(take_prefix(all, 25) == all);
    const std::shared_ptr<Dataset> first = take_prefix(all, 4);
    CHECK(first->size() == 4);
    CHECK(first->num_classes() == all->num_classes());
    CHECK(first->image_shape() == all->image_shape());
    CHECK(first->decode(first->read(3)).pixels == all->decode(all->read(3)).pixels);
    CHECK_THROWS_WITH_AS(first->read(4), doctest::Contains("index 4 out of range [0, 4)"), Error);
    CHECK_THROWS_AS(take_prefix(all, -1), Error);
  }
}
