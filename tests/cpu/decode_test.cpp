// The JPEG fast path against the three-step path it replaces: decode_augment_to_float must give
// bit-identical floats (same decoder, same arithmetic); decode_image_scaled (DCT-domain scaling)
// stays within a stated bound of a full decode followed by a box filter; 12-bit and CMYK JPEGs
// are refused by both decoders with an error naming the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/transforms.h>

using namespace echelon::data;

namespace {

// A smooth colour image with some edges (odd sizes: no multiple of the 8x8 / 16x16 MCU).
Image test_image(int64_t h, int64_t w, int64_t c) {
  Image image{h, w, c, std::vector<uint8_t>(static_cast<size_t>(h * w * c))};
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {
        const double v = 128 + 90 * std::sin(0.11 * x + 0.07 * y + ch) + ((x / 9 + y / 7) % 2) * 20;
        image.pixels[(ch * h + y) * w + x] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
  return image;
}

std::vector<float> three_step(const std::vector<uint8_t>& bytes, int channels,
                              const AugmentOptions& options, const AugmentKey& key,
                              ImageDecoder decoder) {
  const Image image = augment_image(decode_image(bytes, "t.jpg", channels, decoder), options, key);
  std::vector<float> out(static_cast<size_t>(image.numel()));
  to_float(image, options, out.data());
  return out;
}

AugmentOptions options_with(int64_t pad, bool flip, std::vector<float> mean,
                            std::vector<float> std) {
  AugmentOptions options;
  options.crop_padding = pad;
  options.horizontal_flip = flip;
  options.mean = std::move(mean);
  options.std = std::move(std);
  return options;
}

// Sum over pixels of |scaled - box average of the denom x denom block of full|; the largest in
// `worst`.
double box_filter_difference(const Image& full, const Image& scaled, int denom, double& worst) {
  double total = 0;
  for (int64_t ch = 0; ch < scaled.channels; ++ch)
    for (int64_t y = 0; y < scaled.height; ++y)
      for (int64_t x = 0; x < scaled.width; ++x) {
        double box = 0;
        for (int dy = 0; dy < denom; ++dy)
          for (int dx = 0; dx < denom; ++dx)
            box += full.pixels[(ch * full.height + y * denom + dy) * full.width + x * denom + dx];
        box /= denom * denom;
        const double diff =
            std::abs(box - scaled.pixels[(ch * scaled.height + y) * scaled.width + x]);
        total += diff;
        worst = std::max(worst, diff);
      }
  return total;
}

// Fused vs three-step for one encoded image, every setting, 12 augmentation keys.
void check_fused_matches(const std::vector<uint8_t>& jpeg, int channels,
                         const std::vector<AugmentOptions>& settings) {
  for (size_t s = 0; s < settings.size(); ++s) {
    if (channels == 1 && settings[s].mean.size() == 3) continue;
    for (int64_t index = 0; index < 12; ++index) {  // different crops, flips on and off
      CAPTURE(channels);
      CAPTURE(s);
      CAPTURE(index);
      const AugmentKey key{7, 1, index, 0};
      std::vector<float> fused;
      int64_t h = 0, w = 0;
      CHECK(decode_augment_to_float(jpeg, "t.jpg", channels, settings[s], key, fused, h, w));
      CHECK(h == 37);
      CHECK(w == 23);
      CHECK(fused == three_step(jpeg, channels, settings[s], key, ImageDecoder::TurboJpeg));
    }
  }
}

}  // namespace

TEST_SUITE("decode") {
  TEST_CASE("fused decode + crop + flip + normalise equals the three-step path bit for bit") {
    if (!have_stb() || !have_turbojpeg()) return;
    const std::vector<AugmentOptions> settings = {
        options_with(0, false, {}, {}), options_with(4, true, {0.5f}, {0.25f}),
        options_with(3, true, {0.4f, 0.5f, 0.6f}, {0.2f, 0.3f, 0.4f}),
        options_with(40, true, {}, {})};  // padding wider than the image: all-padding rows too
    const std::vector<uint8_t> jpeg = encode_jpeg(test_image(37, 23, 3), 85);
    for (int channels : {1, 3}) check_fused_matches(jpeg, channels, settings);
  }

  TEST_CASE("fused path on a PNG falls back to the three-step path, same floats") {
    if (!have_stb()) return;
    const std::vector<uint8_t> png = encode_png(test_image(19, 30, 3));
    const AugmentOptions options = options_with(2, true, {0.5f}, {0.5f});
    std::vector<float> out;
    int64_t h = 0, w = 0;
    CHECK_FALSE(decode_augment_to_float(png, "t.png", 3, options, {1, 0, 3, 0}, out, h, w));
    CHECK(out == three_step(png, 3, options, {1, 0, 3, 0}, ImageDecoder::Stb));
  }

  TEST_CASE("one JPEG decoder: Auto decodes JPEG with libjpeg-turbo when it is built") {
    if (!have_stb() || !have_turbojpeg()) return;
    const std::vector<uint8_t> jpeg = encode_jpeg(test_image(21, 34, 3), 90);
    CHECK(decode_image(jpeg, "t.jpg", 3).pixels ==
          decode_image(jpeg, "t.jpg", 3, ImageDecoder::TurboJpeg).pixels);
  }

  TEST_CASE("DCT-domain scaled decode: sizes, and within a bound of full decode + box filter") {
    if (!have_stb() || !have_turbojpeg()) return;
    const std::vector<uint8_t> jpeg = encode_jpeg(test_image(96, 80, 3), 95);
    const Image full = decode_image(jpeg, "t.jpg", 3);
    // Target sizes pick the scale: the smallest whose ceil(dim / d) still covers the target.
    CHECK(decode_image_scaled(jpeg, "t.jpg", 3, 96, 80).height == 96);  // 1/1
    CHECK(decode_image_scaled(jpeg, "t.jpg", 3, 47, 10).height == 48);  // 1/2
    CHECK(decode_image_scaled(jpeg, "t.jpg", 3, 24, 20).width == 20);   // 1/4
    CHECK(decode_image_scaled(jpeg, "t.jpg", 3, 1, 1).height == 12);    // 1/8
    for (int denom : {2, 4, 8}) {
      CAPTURE(denom);
      const Image scaled = decode_image_scaled(jpeg, "t.jpg", 3, 96 / denom, 80 / denom);
      REQUIRE(scaled.height == 96 / denom);
      REQUIRE(scaled.width == 80 / denom);
      double worst = 0;
      const double total = box_filter_difference(full, scaled, denom, worst);
      const double mean = total / static_cast<double>(scaled.numel());
      MESSAGE("1/", denom, ": mean |scaled - box(full)| ", mean, ", max ", worst);
      // Bound (docs/data.md): the scaled IDCT keeps the low frequencies of the same coefficients,
      // a box filter averages pixels; measured 0.47-0.51 mean and 2 max (of 255) here.
      CHECK(mean <= 1.0);
      CHECK(worst <= 6.0);
    }
  }

  TEST_CASE("12-bit and CMYK JPEGs: an error naming the file, from both decoders") {
    if (!have_stb()) return;
    std::vector<uint8_t> jpeg = encode_jpeg(test_image(16, 16, 3), 90);
    size_t sof = 2;  // walk to SOF0 (stb_image_write writes baseline)
    while (sof + 4 < jpeg.size() && jpeg[sof + 1] != 0xC0)
      sof += 2 + (size_t{jpeg[sof + 2]} << 8 | jpeg[sof + 3]);
    REQUIRE(sof + 10 < jpeg.size());
    std::vector<uint8_t> twelve_bit = jpeg, cmyk = jpeg;
    twelve_bit[sof + 4] = 12;
    cmyk[sof + 9] = 4;
    for (ImageDecoder decoder : {ImageDecoder::Stb, ImageDecoder::TurboJpeg}) {
      if (decoder == ImageDecoder::TurboJpeg && !have_turbojpeg()) continue;
      CHECK_THROWS_WITH_AS(decode_image(twelve_bit, "photos/a.jpg", 3, decoder),
                           doctest::Contains("photos/a.jpg: 12-bit JPEG is not supported"),
                           echelon::Error);
      CHECK_THROWS_WITH_AS(decode_image(cmyk, "photos/b.jpg", 3, decoder),
                           doctest::Contains("photos/b.jpg: CMYK/YCCK JPEG"), echelon::Error);
    }
  }
}
