// Transforms: crop/flip geometry against a direct reference, determinism per key, normalisation.
#include <doctest/doctest.h>

#include <random>

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
}
