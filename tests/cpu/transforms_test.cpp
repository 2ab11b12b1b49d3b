// Transforms: crop/flip geometry against a direct reference, determinism per key, normalisation,
// the --augment spec parser, resizing and the square crop of --resize.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>
#include <utility>

#include <echelon/base/error.h>
#include <echelon/data/transforms.h>

using namespace echelon;
using namespace echelon::data;

namespace {
Image random_image(int64_t h, int64_t w, int64_t c, uint32_t seed) {
  std::mt19937 rng(seed);
  Image image{h, w, c, std::vector<uint8_t>(h * w * c)};
  for (auto& p : image.pixels) p = static_cast<uint8_t>(1 + rng() % 255);  // never zero
  return image;
}
}  // namespace

TEST_SUITE("transforms") {
  TEST_CASE("crop with padding and flip match the definition") {
    const Image image = random_image(7, 9, 3, 1);
    AugmentOptions options;
    options.crop_padding = 3;
    options.horizontal_flip = true;
    int flips = 0, shifted = 0;
    for (int64_t index = 0; index < 40; ++index) {
      const AugmentKey key{42, 1, index, 0};
      const AugmentDraw d = draw_augment(options, key);
      CHECK(d.dy >= 0);
      CHECK(d.dy <= 6);
      flips += d.flip;
      shifted += d.dy != 3 || d.dx != 3;
      const Image out = augment_image(image, options, key);
      for (int64_t y = 0; y < 7; ++y)
        for (int64_t x = 0; x < 9; ++x)
          for (int64_t c = 0; c < 3; ++c) {
            // Pad by 3, crop at (dy, dx), then mirror: out[y][x] = padded[y+dy][(flip?8-x:x)+dx].
            const int64_t sy = y + d.dy - 3, sx = (d.flip ? 8 - x : x) + d.dx - 3;
            const uint8_t want = sy < 0 || sy >= 7 || sx < 0 || sx >= 9
                                     ? 0
                                     : image.pixels[(c * 7 + sy) * 9 + sx];  // (C, H, W)
            REQUIRE(out.pixels[(c * 7 + y) * 9 + x] == want);
          }
    }
    CHECK(flips > 5);
    CHECK(flips < 35);
    CHECK(shifted > 30);
  }

  TEST_CASE("draws depend on (seed, epoch, index, copy) only") {
    AugmentOptions options;
    options.crop_padding = 4;
    options.horizontal_flip = true;
    const Image image = random_image(8, 8, 1, 2);
    const AugmentKey key{9, 2, 17, 1};
    CHECK(augment_image(image, options, key).pixels == augment_image(image, options, key).pixels);
    int differ_copy = 0, differ_epoch = 0;
    for (int64_t i = 0; i < 20; ++i) {
      const auto base = augment_image(image, options, {9, 2, i, 0}).pixels;
      differ_copy += base != augment_image(image, options, {9, 2, i, 1}).pixels;
      differ_epoch += base != augment_image(image, options, {9, 3, i, 0}).pixels;
    }
    CHECK(differ_copy >= 15);
    CHECK(differ_epoch >= 15);
  }

  TEST_CASE("CHW uint8 -> CHW float with per-channel normalisation") {
    const Image image = random_image(3, 5, 3, 3);
    AugmentOptions options;
    options.mean = {0.5f, 0.25f, 0.1f};
    options.std = {0.2f, 0.5f, 1.5f};
    std::vector<float> out(45);
    to_float(image, options, out.data());
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < 15; ++p) {
        const float want = (image.pixels[c * 15 + p] / 255.0f - options.mean[c]) / options.std[c];
        CHECK(out[c * 15 + p] == doctest::Approx(want).epsilon(1e-5));
      }
    options.std = {0.2f, 0.0f, 1.0f};
    CHECK_THROWS_WITH_AS(to_float(image, options, out.data()),
                         doctest::Contains("std of channel 1"), Error);
    options.std = {0.2f, 0.3f};
    CHECK_THROWS_WITH_AS(to_float(image, options, out.data()), doctest::Contains("3 channels"),
                         Error);
  }

  TEST_CASE("--augment specs: none, crop:P, flip, in any order; anything else names the token") {
    CHECK(parse_augment_spec("none").crop_padding == 0);
    CHECK_FALSE(parse_augment_spec("none").horizontal_flip);
    CHECK(parse_augment_spec("flip").horizontal_flip);
    CHECK(parse_augment_spec("crop:4").crop_padding == 4);
    CHECK_FALSE(parse_augment_spec("crop:4").horizontal_flip);
    const AugmentRecipe both = parse_augment_spec("flip,crop:12");
    CHECK(both.crop_padding == 12);
    CHECK(both.horizontal_flip);
    CHECK(parse_augment_spec("crop:1024").crop_padding == 1024);
    const std::pair<const char*, const char*> bad[] = {
        {"", "empty"},
        {"blur", "unknown word 'blur'"},
        {"crop:4,blur", "unknown word 'blur'"},
        {"Flip", "unknown word 'Flip'"},
        {"crop", "'crop' needs a padding"},
        {"crops:4", "'crops:4' needs a padding"},
        {"crop:", "'crop:' needs a padding of 1..1024"},
        {"crop:0", "'crop:0' needs a padding of 1..1024"},
        {"crop:-1", "'crop:-1' needs a padding"},
        {"crop:+4", "'crop:+4' needs a padding"},
        {"crop:4.0", "'crop:4.0' needs a padding"},
        {"crop:1025", "'crop:1025' needs a padding"},
        {"crop:99999999999999999999", "needs a padding"},
        {"crop:4,crop:2", "'crop:2' is a second crop"},
        {"flip,flip", "'flip' appears twice"},
        {"none,flip", "'none' cannot be combined"},
        {"flip,", "empty entry"},
        {",flip", "empty entry"},
        {"crop:4 ", "'crop:4 ' needs a padding"},
    };
    for (const auto& entry : bad) {  // not a structured binding: clang 14 cannot capture one
      const char* spec = entry.first;
      const char* message = entry.second;
      CAPTURE(spec);
      CHECK_THROWS_WITH_AS(parse_augment_spec(spec), doctest::Contains(message), Error);
    }
  }

  TEST_CASE(
      "resize_shorter_side: sizes as torchvision's Resize(int), antialiased, flat stays flat") {
    const Image wide = random_image(30, 50, 3, 4);
    const Image small = resize_shorter_side(wide, 10);
    CHECK(small.height == 10);
    CHECK(small.width == 16);  // 50 * 10 / 30 = 16.7, rounded down
    CHECK(small.pixels.size() == 10 * 16 * 3);
    const Image tall = resize_shorter_side(random_image(50, 30, 1, 5), 12);
    CHECK(tall.height == 20);
    CHECK(tall.width == 12);
    CHECK(resize_shorter_side(wide, 30).pixels == wide.pixels);  // already that size
    const Image up = resize_shorter_side(random_image(5, 7, 1, 6), 20);
    CHECK(up.height == 20);
    CHECK(up.width == 28);
    // A flat image stays flat at every scale (the weights of each output sum to 1).
    const Image flat{9, 13, 2, std::vector<uint8_t>(9 * 13 * 2, 77)};
    for (int64_t size : {3, 9, 25}) {
      const Image out = resize_shorter_side(flat, size);
      CHECK(std::all_of(out.pixels.begin(), out.pixels.end(), [](uint8_t p) { return p == 77; }));
    }
    // A 1-pixel checkerboard shrunk 8x averages to mid-grey (a point sampler would give 0 or 255).
    Image board{64, 64, 1, std::vector<uint8_t>(64 * 64)};
    for (int64_t y = 0; y < 64; ++y)
      for (int64_t x = 0; x < 64; ++x) board.pixels[y * 64 + x] = (x + y) % 2 ? 255 : 0;
    const Image grey = resize_shorter_side(board, 8);
    for (const uint8_t p : grey.pixels) CHECK(std::abs(int{p} - 128) <= 2);
    // Upscaling 2x interpolates between neighbours.
    const Image ramp{1, 2, 1, {0, 200}};
    const Image ramp2 = resize_shorter_side(ramp, 2);
    REQUIRE(ramp2.width == 4);
    REQUIRE(ramp2.height == 2);
    CHECK(ramp2.pixels == std::vector<uint8_t>{0, 50, 150, 200, 0, 50, 150, 200});
    CHECK_THROWS_WITH_AS(resize_shorter_side(ramp, 0), doctest::Contains("shorter side of 0"),
                         Error);
  }

  TEST_CASE("crop_to: centred for evaluation, random per key for training, then pad-crop/flip") {
    const Image image = random_image(10, 17, 2, 7);
    AugmentOptions options;
    options.crop_to = 10;
    const Image centre = augment_image(image, options, {1, 0, 0, 0});
    REQUIRE(centre.height == 10);
    REQUIRE(centre.width == 10);
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t y = 0; y < 10; ++y)
        for (int64_t x = 0; x < 10; ++x)  // (17 - 10) / 2 = 3 columns cut on the left
          CHECK(centre.pixels[(ch * 10 + y) * 10 + x] == image.pixels[(ch * 10 + y) * 17 + x + 3]);
    options.random_crop = true;
    std::set<std::vector<uint8_t>> crops;
    for (int64_t index = 0; index < 30; ++index) {
      const Image crop = augment_image(image, options, {1, 0, index, 0});
      CHECK(crop.pixels == augment_image(image, options, {1, 0, index, 0}).pixels);
      CHECK(crop.height == 10);
      CHECK(crop.width == 10);
      crops.insert(crop.pixels);
    }
    CHECK(crops.size() >= 6);  // 8 possible offsets
    options.crop_padding = 2;
    options.horizontal_flip = true;
    CHECK(augment_image(image, options, {3, 1, 4, 0}).height == 10);
    options.crop_to = 11;
    CHECK_THROWS_WITH_AS(augment_image(image, options, {1, 0, 0, 0}),
                         doctest::Contains("10x17 image is smaller than the 11x11 crop"), Error);
  }
}
