// Dataset loaders on tiny files written in the real formats, valid and malformed.
#include <doctest/doctest.h>

#include <zlib.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

#include <echelon/base/error.h>
#include <echelon/data/dataset.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/io.h>
#include <echelon/data/registry.h>

namespace fs = std::filesystem;
using echelon::test::temp_dir;
using namespace echelon;
using namespace echelon::data;

namespace {

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w, std::mt19937& rng) {
  std::vector<uint8_t> out;
  put_be32(out, 0x803);
  put_be32(out, n);
  put_be32(out, h);
  put_be32(out, w);
  for (uint32_t i = 0; i < n * h * w; ++i) out.push_back(static_cast<uint8_t>(rng()));
  return out;
}

std::vector<uint8_t> idx_labels(uint32_t n, std::mt19937& rng) {
  std::vector<uint8_t> out;
  put_be32(out, 0x801);
  put_be32(out, n);
  for (uint32_t i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(rng() % 10));
  return out;
}

void write_gzip(const fs::path& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  gzclose(file);
}

std::vector<uint8_t> read_file_for_test(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string load_error(const std::string& images, const std::string& labels) {
  try {
    load_idx(images, labels);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_SUITE("datasets") {
  TEST_CASE("IDX raw and gzip load the same bytes and labels") {
    std::mt19937 rng(7);
    const fs::path dir = temp_dir("idx");
    const auto images = idx_images(13, 5, 7, rng);
    const auto labels = idx_labels(13, rng);
    write_file((dir / "img").string(), images);
    write_file((dir / "lab").string(), labels);
    write_gzip(dir / "img.gz", images);
    write_gzip(dir / "lab.gz", labels);
    for (const std::string suffix : {"", ".gz"}) {
      LabeledImages set =
          load_idx((dir / "img").string() + suffix, (dir / "lab").string() + suffix);
      REQUIRE(set.images.shape() == Shape{13, 1, 5, 7});
      const auto pixels = set.images.to_vector<uint8_t>();
      CHECK(std::equal(pixels.begin(), pixels.end(), images.begin() + 16));
      const auto got = set.labels.to_vector<int64_t>();
      for (int i = 0; i < 13; ++i) CHECK(got[i] == labels[8 + i]);
    }
  }

  TEST_CASE("IDX malformed files name the file, the offset and the problem") {
    std::mt19937 rng(11);
    const fs::path dir = temp_dir("idx_bad");
    auto images = idx_images(9, 4, 3, rng);
    const auto labels = idx_labels(9, rng);
    const std::string img = (dir / "img").string(), lab = (dir / "lab").string();
    write_file(lab, labels);

    write_file(img, std::vector<uint8_t>(images.begin(), images.end() - 5));  // truncated
    std::string message = load_error(img, lab);
    CHECK(message.find("truncated") != std::string::npos);
    CHECK(message.find(img) != std::string::npos);
    CHECK(message.find("offset") != std::string::npos);

    auto bad_magic = images;
    bad_magic[3] = 0x04;
    write_file(img, bad_magic);
    message = load_error(img, lab);
    CHECK(message.find("bad magic 0x00000804") != std::string::npos);

    write_file(img, idx_images(8, 4, 3, rng));  // 8 images, 9 labels
    message = load_error(img, lab);
    CHECK(message.find("count mismatch") != std::string::npos);
    CHECK(message.find("8 images") != std::string::npos);

    write_file(img, std::vector<uint8_t>(images.begin(), images.begin() + 10));  // short header
    CHECK(load_error(img, lab).find("truncated header") != std::string::npos);

    auto gz = dir / "img.gz";  // truncated gzip stream
    write_gzip(gz, images);
    auto gz_bytes = read_file_for_test(gz);
    gz_bytes.resize(gz_bytes.size() / 2);
    write_file(gz.string(), gz_bytes);
    message = load_error(gz.string(), lab);
    CHECK(message.find("gzip stream is truncated") != std::string::npos);
    CHECK(message.find(gz.string()) != std::string::npos);

    write_gzip(gz, images);  // a flipped byte in the CRC-32 trailer
    gz_bytes = read_file_for_test(gz);
    gz_bytes[gz_bytes.size() - 6] ^= 0xFF;
    write_file(gz.string(), gz_bytes);
    message = load_error(gz.string(), lab);
    CHECK(message.find("gzip stream is corrupt") != std::string::npos);
    CHECK(message.find("incorrect data check") != std::string::npos);

    // The size trailer (ISIZE) is read before inflating, to reserve the output: claiming 4 GiB
    // must neither allocate that much nor load anything.
    write_gzip(gz, images);
    gz_bytes = read_file_for_test(gz);
    std::fill(gz_bytes.end() - 4, gz_bytes.end(), uint8_t{0xFF});
    write_file(gz.string(), gz_bytes);
    message = load_error(gz.string(), lab);
    CHECK(message.find("gzip stream is corrupt") != std::string::npos);
    CHECK(message.find("incorrect length check") != std::string::npos);

    CHECK(load_error(dir.string(), lab).find("error reading") != std::string::npos);

    // Found by fuzz_idx: zero images of 4294967167 x 2801795071 pixels used to reach the tensor
    // shape and overflow int64 there (undefined behaviour) instead of failing on the header.
    const std::vector<uint8_t> empty_huge = {0,    0,    8,    3,    0,    0,    0,    0,
                                             0xFF, 0xFF, 0xFF, 0x7F, 0xA7, 0x00, 0x00, 0xFF};
    write_file(img, empty_huge);
    write_file(lab, {0, 0, 8, 1, 0, 0, 0, 0});
    message = load_error(img, lab);
    CHECK(message.find("larger than 2 GiB") != std::string::npos);
    CHECK(message.find(img) != std::string::npos);
  }

  TEST_CASE("a multi-member gzip file (cat a.gz b.gz) is read whole") {
    std::mt19937 rng(11);
    const auto images = idx_images(6, 4, 5, rng);
    const auto labels = idx_labels(6, rng);
    const fs::path dir = temp_dir("multi_gzip");
    const size_t half = images.size() / 2;
    write_gzip(dir / "a.gz", {images.begin(), images.begin() + half});
    write_gzip(dir / "b.gz", {images.begin() + half, images.end()});
    std::vector<uint8_t> both = read_file_for_test(dir / "a.gz");
    const std::vector<uint8_t> second = read_file_for_test(dir / "b.gz");
    both.insert(both.end(), second.begin(), second.end());
    write_file((dir / "img.gz").string(), both);
    write_file((dir / "lab").string(), labels);
    const LabeledImages set = load_idx((dir / "img.gz").string(), (dir / "lab").string());
    const auto pixels = set.images.to_vector<uint8_t>();
    CHECK(std::equal(pixels.begin(), pixels.end(), images.begin() + 16, images.end()));
  }

  TEST_CASE("libdeflate and zlib inflate the same bytes, into a vector or a tensor") {
    // The first member is 40x the last, whose size is the trailer's hint: libdeflate's buffer
    // grows twice over it for member 0.
    std::mt19937 rng(5);
    const fs::path dir = temp_dir("inflaters");
    std::vector<uint8_t> first(40000), last(1000);
    for (auto& b : first) b = static_cast<uint8_t>(rng() % 7);  // compressible
    for (auto& b : last) b = static_cast<uint8_t>(rng());
    write_gzip(dir / "a.gz", first);
    write_gzip(dir / "b.gz", last);
    std::vector<uint8_t> both = read_file_for_test(dir / "a.gz");
    const std::vector<uint8_t> second = read_file_for_test(dir / "b.gz");
    both.insert(both.end(), second.begin(), second.end());
    const std::string multi = (dir / "multi.gz").string(), plain = (dir / "plain").string();
    write_file(multi, both);
    write_file(plain, last);
    std::vector<uint8_t> expected = first;
    expected.insert(expected.end(), last.begin(), last.end());
    for (const Inflater inflater : {Inflater::Fastest, Inflater::Zlib}) {
      CAPTURE(static_cast<int>(inflater));
      CHECK(read_file(multi, inflater) == expected);
      CHECK(read_file_tensor(multi, inflater).to_vector<uint8_t>() == expected);
      CHECK(read_file((dir / "a.gz").string(), inflater) == first);
      CHECK(read_file_tensor(plain, inflater).to_vector<uint8_t>() == last);
    }
    CHECK(read_file(plain) == last);
    write_file(plain, {});
    CHECK(read_file(plain).empty());
    CHECK(read_file_tensor(plain).numel() == 0);
    MESSAGE("libdeflate in this build: ", libdeflate_available());
  }

  TEST_CASE("a corrupt member after a good one: the same error from both inflaters") {
    std::mt19937 rng(9);
    const fs::path dir = temp_dir("inflater_errors");
    std::vector<uint8_t> data(5000);
    for (auto& b : data) b = static_cast<uint8_t>(rng() % 5);
    write_gzip(dir / "a.gz", data);
    std::vector<uint8_t> bytes = read_file_for_test(dir / "a.gz");
    const size_t member = bytes.size();
    bytes.insert(bytes.end(), bytes.begin(), bytes.end());
    bytes[member + bytes.size() / 4] ^= 0x55;  // inside the second member's deflate data
    const std::string path = (dir / "bad.gz").string();
    write_file(path, bytes);
    std::string messages[2];
    int i = 0;
    for (const Inflater inflater : {Inflater::Fastest, Inflater::Zlib}) {
      try {
        read_file_tensor(path, inflater);
      } catch (const Error& e) {
        messages[i] = e.what();
      }
      ++i;
    }
    CHECK(messages[0].find("in member 1 at offset " + std::to_string(member)) != std::string::npos);
    CHECK(messages[0].find(path) != std::string::npos);
    CHECK(messages[0] == messages[1]);
  }

  TEST_CASE("Fashion-MNIST from the Debian package, when installed") {
    if (!fs::exists(std::string(kDefaultFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) return;
    LabeledImages test = load_fashion_mnist(kDefaultFashionMnistDir, "test");
    CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
    CHECK(test.num_classes == 10);
    const auto labels = test.labels.to_vector<int64_t>();
    CHECK(*std::max_element(labels.begin(), labels.end()) == 9);
  }

  TEST_CASE("CIFAR-10 records: valid, truncated, bad label") {
    std::mt19937 rng(3);
    const fs::path dir = temp_dir("cifar");
    std::vector<uint8_t> bytes;
    for (int r = 0; r < 3; ++r) {
      bytes.push_back(static_cast<uint8_t>(r * 3 + 1));
      for (int i = 0; i < 3072; ++i) bytes.push_back(static_cast<uint8_t>(rng()));
    }
    const std::string path = (dir / "test_batch.bin").string();
    write_file(path, bytes);
    LabeledImages set = load_cifar10(dir.string(), "test");
    REQUIRE(set.images.shape() == Shape{3, 3, 32, 32});
    CHECK(set.labels.to_vector<int64_t>() == std::vector<int64_t>{1, 4, 7});
    const auto pixels = set.images.to_vector<uint8_t>();
    CHECK(pixels[3072 + 5] == bytes[3073 + 1 + 5]);

    write_file(path, std::vector<uint8_t>(bytes.begin(), bytes.end() - 100));
    CHECK_THROWS_WITH_AS(load_cifar10(dir.string(), "test"),
                         doctest::Contains("offset 6146 is truncated"), Error);
    auto bad = bytes;
    bad[3073] = 12;
    write_file(path, bad);
    CHECK_THROWS_WITH_AS(load_cifar10(dir.string(), "test"),
                         doctest::Contains("record 1 at offset 3073 has label 12"), Error);
    CHECK_THROWS_WITH_AS(load_cifar10(dir.string(), "train"), doctest::Contains("data_batch_1"),
                         Error);
  }

  TEST_CASE("a missing data set folder says where the files come from") {
    const std::string missing = (temp_dir("no_dataset") / "absent").string();
    CHECK_THROWS_WITH_AS(load_dataset("fashion-mnist", missing),
                         doctest::Contains("apt-get install dataset-fashion-mnist"), Error);
    CHECK_THROWS_WITH_AS(load_dataset("mnist", missing),
                         doctest::Contains(("no folder '" + missing + "'").c_str()), Error);
    CHECK_THROWS_WITH_AS(load_dataset("cifar10", missing),
                         doctest::Contains("cifar-10-binary.tar.gz"), Error);
    // A folder that exists but lacks a file still names the file.
    CHECK_THROWS_WITH_AS(load_dataset("cifar10", temp_dir("empty_cifar").string()),
                         doctest::Contains("data_batch_1.bin"), Error);
  }

  TEST_CASE("an image folder that is missing or a file is named as such, not 'missing train/'") {
    const fs::path root = temp_dir("folder_typo");
    const std::string missing = (root / "absent").string();
    CHECK_THROWS_WITH_AS(load_dataset("folder", missing),
                         doctest::Contains(("'" + missing + "': no such folder").c_str()), Error);
    const fs::path file = root / "file";
    std::ofstream(file) << "x";
    CHECK_THROWS_WITH_AS(load_dataset("folder", file.string()),
                         doctest::Contains("is a file, not a folder"), Error);
  }

  TEST_CASE("image folder splits share the training split's labels") {
    if (!have_stb()) return;
    const fs::path dir = temp_dir("folder_splits");
    const Image image{4, 4, 3, std::vector<uint8_t>(4 * 4 * 3, 7)};
    const auto put = [&](const fs::path& file) {
      fs::create_directories(file.parent_path());
      write_file(file.string(), encode_png(image));
    };
    for (const char* cls : {"ant", "bee", "cat"}) put(dir / "train" / cls / "a.png");
    // test/ lacks "bee": "cat" must still be label 2, not 1.
    put(dir / "test" / "cat" / "x.png");
    DatasetSplits splits = load_dataset("folder", dir.string());
    CHECK(splits.class_names == std::vector<std::string>{"ant", "bee", "cat"});
    CHECK(splits.num_classes == 3);
    CHECK(splits.test->read(0).label == 2);
    // Test only (eval): train/ may be absent; the labels come from the given class names.
    fs::remove_all(dir / "train");
    splits = load_dataset("folder", dir.string(),
                          {.test_only = true, .class_names = {"ant", "bee", "cat"}});
    CHECK(splits.train == nullptr);
    CHECK(splits.test->read(0).label == 2);
    // A test class the model was not trained on is an error naming it.
    put(dir / "test" / "dog" / "y.png");
    CHECK_THROWS_WITH_AS(
        load_dataset("folder", dir.string(),
                     {.test_only = true, .class_names = {"ant", "bee", "cat"}}),
        doctest::Contains("class folder 'dog' is not one of the training classes (ant, bee, cat)"),
        Error);
  }

  TEST_CASE("image folder: PNG and JPEG decode; corrupt files name the file") {
    if (!have_stb()) return;
    std::mt19937 rng(5);
    const fs::path dir = temp_dir("folder");
    fs::create_directories(dir / "cat");
    fs::create_directories(dir / "dog");
    Image image{9, 11, 3, std::vector<uint8_t>(9 * 11 * 3)};
    for (auto& p : image.pixels) p = static_cast<uint8_t>(rng());
    write_file((dir / "cat" / "a.png").string(), encode_png(image));
    write_file((dir / "dog" / "b.JPG").string(), encode_jpeg(image, 95));
    write_file((dir / "dog" / "notes.txt").string(), {1, 2, 3});
    auto dataset = make_image_folder_dataset(dir.string(), 3);
    REQUIRE(dataset->size() == 2);
    CHECK(dataset->num_classes() == 2);
    CHECK(dataset->image_shape() == Shape{3, 9, 11});
    const Image png = dataset->decode(dataset->read(0));
    CHECK(png.pixels == image.pixels);  // lossless
    const RawRecord jpeg_record = dataset->read(1);
    CHECK(jpeg_record.label == 1);
    const Image jpeg = dataset->decode(jpeg_record);
    double error = 0;
    for (size_t i = 0; i < jpeg.pixels.size(); ++i)
      error += std::abs(jpeg.pixels[i] - image.pixels[i]);
    CHECK(error / jpeg.pixels.size() < 40);  // lossy, but the same picture (noise is hard)
    // Both decoders agree on a JPEG when libjpeg-turbo is built in.
    if (have_turbojpeg()) {
      const Image via_stb = decode_image(jpeg_record.bytes, "b", 3, ImageDecoder::Stb);
      const Image via_turbo = decode_image(jpeg_record.bytes, "b", 3, ImageDecoder::TurboJpeg);
      double diff = 0;
      for (size_t i = 0; i < via_stb.pixels.size(); ++i)
        diff += std::abs(via_stb.pixels[i] - via_turbo.pixels[i]);
      CHECK(diff / via_stb.pixels.size() < 3);
    }
    RawRecord corrupt = jpeg_record;
    corrupt.bytes.resize(corrupt.bytes.size() / 3);
    CHECK_THROWS_WITH_AS(dataset->decode(corrupt), doctest::Contains("b.JPG"), Error);
    RawRecord garbage = dataset->read(0);
    garbage.bytes.assign(50, 0x42);
    CHECK_THROWS_WITH_AS(dataset->decode(garbage), doctest::Contains("a.png"), Error);
    CHECK_THROWS_WITH_AS(make_image_folder_dataset((dir / "cat").string()),
                         doctest::Contains("no class subfolders"), Error);
  }

  TEST_CASE("stb decodes only PNG, JPEG and BMP; a BMP must hold its pixel rows") {
    if (!have_stb()) return;
    // A 24-bit BMP of 3 x 2 pixels: rows bottom-up, BGR, each row padded to 12 bytes.
    const auto le = [](std::vector<uint8_t>& out, uint32_t v, int n) {
      for (int k = 0; k < n; ++k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
    };
    const auto bmp = [&](uint32_t width, uint32_t height, size_t pixel_bytes) {
      std::vector<uint8_t> out{'B', 'M'};
      le(out, static_cast<uint32_t>(54 + pixel_bytes), 4);
      le(out, 0, 4);
      le(out, 54, 4);  // pixel data offset
      le(out, 40, 4);  // BITMAPINFOHEADER
      le(out, width, 4);
      le(out, height, 4);
      le(out, 1, 2);   // planes
      le(out, 24, 2);  // bits per pixel
      le(out, 0, 4);   // BI_RGB
      for (int k = 0; k < 5; ++k) le(out, 0, 4);
      for (size_t i = 0; i < pixel_bytes; ++i) out.push_back(static_cast<uint8_t>(10 + i));
      return out;
    };
    const Image small = decode_image(bmp(3, 2, 24), "small.bmp", 3);
    REQUIRE(small.pixels.size() == 18);
    // Top-left pixel = first pixel of the second stored row (offset 12): B 22, G 23, R 24.
    CHECK(small.pixels[0] == 24);
    CHECK(small.pixels[6] == 23);
    CHECK(small.pixels[12] == 22);
    // The same header claiming 3000 x 2000 pixels over 24 bytes: refused, not zero-filled.
    CHECK_THROWS_WITH_AS(
        decode_image(bmp(3000, 2000, 24), "big.bmp", 3),
        doctest::Contains("big.bmp: BMP of 3000x2000 pixels at 24 bits needs "
                          "54 + 9000 x 2000 bytes, the file has 78 (truncated file)"),
        Error);
    // What stb would read as a TGA of megapixels (a fuzz finding, 24 bytes) names its file.
    const std::vector<uint8_t> tga{0,    0,    0,    0x0b, 0xe0, 0,    1,    0xff,
                                   0xe0, 0xd9, 0xa2, 0,    0xff, 0xff, 0xff, 0xff,
                                   1,    0x10, 0xff, 0xdf, 0xff, 0xff, 0xff, 0xff};
    CHECK_THROWS_WITH_AS(
        decode_image(tga, "x.png", 3, ImageDecoder::Stb),
        doctest::Contains("x.png: cannot decode image: not a PNG, JPEG or BMP file (24 bytes"),
        Error);
  }

  TEST_CASE("a BMP pixel whose palette index is past the palette is refused, naming it") {
    // stb_image would decode it from its uninitialised stack: different pixels on every run
    // (fuzz_diff_jpeg in CI, stop 37).
    if (!have_stb()) return;
    const auto le = [](std::vector<uint8_t>& out, uint32_t v, int n) {
      for (int k = 0; k < n; ++k) out.push_back(static_cast<uint8_t>(v >> (8 * k)));
    };
    // A 3 x 2 BMP of `bits` per pixel with `colours` palette entries (colour i = (i, 2i, 3i) as
    // R, G, B) and the given pixel rows, each padded to 4 bytes; `offset` overrides the pixel
    // data offset.
    const auto bmp = [&](int bits, int colours, const std::vector<std::vector<uint8_t>>& rows,
                         int64_t offset = -1) {
      std::vector<uint8_t> out{'B', 'M'};
      const uint32_t start = offset >= 0 ? uint32_t(offset) : uint32_t(54 + 4 * colours);
      le(out, start + 8, 4);
      le(out, 0, 4);
      le(out, start, 4);
      le(out, 40, 4);  // BITMAPINFOHEADER
      le(out, 3, 4);   // width
      le(out, 2, 4);   // height: rows bottom-up
      le(out, 1, 2);
      le(out, static_cast<uint32_t>(bits), 2);
      for (int k = 0; k < 6; ++k) le(out, 0, 4);  // BI_RGB, then sizes and counts stb ignores
      for (int i = 0; i < colours; ++i) le(out, uint32_t(3 * i | (2 * i) << 8 | i << 16), 4);
      out.resize(start, 0);
      for (const auto& row : rows) {
        out.insert(out.end(), row.begin(), row.end());
        out.resize(out.size() + (4 - row.size() % 4) % 4, 0);
      }
      return out;
    };
    // 8 bits, 3 colours: indices 0..2 decode to their colours; 3 is past the palette.
    const Image good = decode_image(bmp(8, 3, {{0, 1, 2}, {2, 2, 0}}), "good.bmp", 3);
    REQUIRE(good.pixels.size() == 18);
    CHECK(good.pixels[0] == 2);       // red of the top-left pixel: the second stored row, index 2
    CHECK(good.pixels[6 + 1] == 4);   // green of the top row's second pixel, index 2
    CHECK(good.pixels[12 + 4] == 3);  // blue of the bottom row's second pixel, index 1
    CHECK_THROWS_WITH_AS(decode_image(bmp(8, 3, {{0, 1, 2}, {2, 3, 0}}), "b8.bmp", 3),
                         doctest::Contains("b8.bmp: BMP pixel at offset 71 (row 1 of the file, "
                                           "column 1) uses palette index 3, but the palette "
                                           "holds 3 colours (damaged file)"),
                         Error);
    // 4 bits: high nibble first; the third pixel of the first row is index 9.
    CHECK_NOTHROW(decode_image(bmp(4, 5, {{0x01, 0x40}, {0x23, 0x10}}), "good4.bmp", 1));
    CHECK_THROWS_WITH_AS(decode_image(bmp(4, 5, {{0x01, 0x90}, {0x23, 0x10}}), "b4.bmp", 1),
                         doctest::Contains("b4.bmp: BMP pixel at offset 75 (row 0 of the file, "
                                           "column 2) uses palette index 9"),
                         Error);
    // 1 bit, one colour: a set bit is past it.
    CHECK_NOTHROW(decode_image(bmp(1, 1, {{0x00}, {0x1F}}), "good1.bmp", 3));
    CHECK_THROWS_WITH_AS(decode_image(bmp(1, 1, {{0x00}, {0x20}}), "b1.bmp", 3),
                         doctest::Contains("(row 1 of the file, column 2) uses palette index 1, "
                                           "but the palette holds 1 colours"),
                         Error);
    // stb compares the compression field as a signed int: 0xFF000000 passed as uncompressed.
    std::vector<uint8_t> negative = bmp(8, 3, {{0, 1, 2}, {2, 3, 0}});
    negative[33] = 0xFF;
    CHECK_THROWS_WITH_AS(decode_image(negative, "c.bmp", 3),
                         doctest::Contains("c.bmp: BMP compression 4278190080 is not supported"),
                         Error);
    // stb reads the fields of a header cut short as zeros.
    const std::vector<uint8_t> whole = bmp(8, 3, {{0, 1, 2}, {2, 1, 0}});
    CHECK_THROWS_WITH_AS(decode_image({whole.begin(), whole.begin() + 32}, "cut.bmp", 3),
                         doctest::Contains("cut.bmp: BMP header of 40 bytes ends past the end of "
                                           "the 32-byte file (truncated file)"),
                         Error);
    std::vector<uint8_t> odd_header = whole;
    odd_header[14] = 41;
    CHECK_THROWS_WITH_AS(decode_image(odd_header, "h.bmp", 3),
                         doctest::Contains("h.bmp: BMP header of 41 bytes is none of the kinds"),
                         Error);
    // Pixels starting inside the header leave stb no palette at all.
    CHECK_THROWS_WITH_AS(decode_image(bmp(8, 0, {{0, 0, 0}, {0, 0, 0}}, 50), "none.bmp", 3),
                         doctest::Contains("none.bmp: BMP of 8 bits per pixel has no palette: its "
                                           "pixels start at offset 50, inside its 40-byte header"),
                         Error);
  }

  TEST_CASE("image codecs: decoded images are planar (C, H, W), encoders interleave") {
    if (!have_stb()) return;
    // Pure red, one plane per channel. Were a layout conversion missing on either side, the gray
    // decode would not be uniform or the colour planes would come back mixed.
    const int64_t h = 4, w = 6;
    Image red{h, w, 3, std::vector<uint8_t>(3 * h * w, 0)};
    std::fill_n(red.pixels.begin(), h * w, uint8_t{255});
    const std::vector<uint8_t> png = encode_png(red);
    CHECK(decode_image(png, "red.png", 3).pixels == red.pixels);
    const Image gray = decode_image(png, "red.png", 1);
    REQUIRE(gray.pixels.size() == static_cast<size_t>(h * w));
    for (const uint8_t p : gray.pixels) CHECK(std::abs(p - 76) <= 1);  // luma of pure red
    for (const ImageDecoder decoder : {ImageDecoder::Stb, ImageDecoder::TurboJpeg}) {
      if (decoder == ImageDecoder::TurboJpeg && !have_turbojpeg()) continue;
      const Image jpeg = decode_image(encode_jpeg(red, 100), "red.jpg", 3, decoder);
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t p = 0; p < h * w; ++p)
          CHECK(std::abs(jpeg.pixels[ch * h * w + p] - red.pixels[ch * h * w + p]) <= 8);
    }
  }

  TEST_CASE("synthetic dataset: known pixels and labels") {
    SyntheticOptions options;
    options.size = 17;
    options.num_classes = 3;
    options.channels = 2;
    options.height = 3;
    options.width = 5;
    options.corrupt_indices = {4};
    auto dataset = make_synthetic_dataset(options);
    const Image image = dataset->decode(dataset->read(11));
    CHECK(dataset->read(11).label == 2);
    CHECK(image.pixels[(1 * 3 + 2) * 5 + 3] == synthetic_pixel(11, 2, 3, 1));  // (C, H, W)
    CHECK_THROWS_WITH_AS(dataset->decode(dataset->read(4)), doctest::Contains("synthetic[4]"),
                         Error);
    CHECK_THROWS_AS(dataset->read(17), Error);
  }
}
