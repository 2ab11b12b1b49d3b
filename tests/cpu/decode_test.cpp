// The JPEG fast path against the three-step path it replaces: decode_augment_to_float must give
// bit-identical floats (same decoder, same arithmetic); decode_image_scaled (DCT-domain scaling)
// stays within a stated bound of a full decode followed by a box filter; CMYK/YCCK JPEGs decode to
// the RGB/gray they were made from (and, tests/pillow_cmyk.sh, exactly to Pillow's convert());
// 12-bit, lossless and hierarchical JPEGs are "unsupported JPEG variant" from both decoders, naming
// the file.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/io.h>
#include <echelon/data/jpeg_decode.h>
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

// Where stb_image_write's baseline frame header (SOF0) starts.
size_t sof0_offset(const std::vector<uint8_t>& jpeg) {
  size_t sof = 2;
  while (sof + 4 < jpeg.size() && jpeg[sof + 1] != 0xC0)
    sof += 2 + (size_t{jpeg[sof + 2]} << 8 | jpeg[sof + 3]);
  REQUIRE(sof + 10 < jpeg.size());
  return sof;
}

// (H, W, 4) Adobe-inverted CMYK (255 = no ink) whose C * K / 255 gives back the (C, H, W) RGB:
// K' = max(R, G, B), C' = R * 255 / K'.
std::vector<uint8_t> adobe_cmyk_of(const Image& rgb) {
  const int64_t pixels = rgb.height * rgb.width;
  std::vector<uint8_t> cmyk(static_cast<size_t>(pixels * 4));
  for (int64_t p = 0; p < pixels; ++p) {
    const int r = rgb.pixels[p], g = rgb.pixels[pixels + p], b = rgb.pixels[2 * pixels + p];
    const int k = std::max({r, g, b, 1});
    const int channel[3] = {r, g, b};
    for (int ch = 0; ch < 3; ++ch)
      cmyk[4 * p + ch] = static_cast<uint8_t>((channel[ch] * 255 + k / 2) / k);
    cmyk[4 * p + 3] = static_cast<uint8_t>(k);
  }
  return cmyk;
}

// ITU-R 601 luma of a (3, H, W) image, rounded.
Image luma_of(const Image& rgb) {
  const int64_t pixels = rgb.height * rgb.width;
  Image gray{rgb.height, rgb.width, 1, std::vector<uint8_t>(static_cast<size_t>(pixels))};
  for (int64_t p = 0; p < pixels; ++p)
    gray.pixels[p] =
        static_cast<uint8_t>(std::lround(0.299 * rgb.pixels[p] + 0.587 * rgb.pixels[pixels + p] +
                                         0.114 * rgb.pixels[2 * pixels + p]));
  return gray;
}

double mean_abs_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                           double& worst) {
  double total = 0;
  worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = std::abs(static_cast<double>(a[i]) - b[i]);
    total += diff;
    worst = std::max(worst, diff);
  }
  return total / static_cast<double>(a.size());
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

  TEST_CASE("12-bit, lossless and hierarchical JPEGs: unsupported JPEG variant, never corrupt") {
    if (!have_stb()) return;
    const std::vector<uint8_t> jpeg = encode_jpeg(test_image(16, 16, 3), 90);
    const size_t sof = sof0_offset(jpeg);
    std::vector<uint8_t> twelve_bit = jpeg, lossless = jpeg, hierarchical = jpeg;
    twelve_bit[sof + 4] = 12;
    lossless[sof + 1] = 0xC3;      // SOF3: lossless, Huffman
    hierarchical[sof + 1] = 0xC5;  // SOF5: differential sequential DCT
    for (ImageDecoder decoder : {ImageDecoder::Stb, ImageDecoder::TurboJpeg}) {
      if (decoder == ImageDecoder::TurboJpeg && !have_turbojpeg()) continue;
      CAPTURE(static_cast<int>(decoder));
      const std::string at = "SOF marker at offset " + std::to_string(sof);
      CHECK_THROWS_WITH_AS(
          decode_image(twelve_bit, "photos/a.jpg", 3, decoder),
          doctest::Contains(
              ("photos/a.jpg: unsupported JPEG variant (12-bit precision, " + at).c_str()),
          echelon::Error);
      CHECK_THROWS_WITH_AS(
          decode_image(lossless, "photos/b.jpg", 3, decoder),
          doctest::Contains(("photos/b.jpg: unsupported JPEG variant (lossless, " + at).c_str()),
          echelon::Error);
      CHECK_THROWS_WITH_AS(
          decode_image(hierarchical, "photos/c.jpg", 1, decoder),
          doctest::Contains("photos/c.jpg: unsupported JPEG variant (hierarchical"),
          echelon::Error);
    }
  }

  TEST_CASE("CMYK (YCCK) JPEG decodes to the RGB and gray it was made from") {
    if (!have_turbojpeg()) return;
    const Image rgb = test_image(37, 23, 3);
    const std::vector<uint8_t> jpeg = encode_jpeg_cmyk(adobe_cmyk_of(rgb), 37, 23, 100);
    const Image decoded = decode_image(jpeg, "scan.jpg", 3);
    REQUIRE(decoded.channels == 3);
    REQUIRE(decoded.pixels.size() == rgb.pixels.size());
    double worst = 0;
    const double mean = mean_abs_difference(decoded.pixels, rgb.pixels, worst);
    MESSAGE("CMYK -> YCCK JPEG (q100) -> RGB: mean |diff| ", mean, ", max ", worst);
    // Wrong polarity (non-inverted CMYK) or a channel swap is off by ~100 on average.
    CHECK(mean <= 2.0);
    CHECK(worst <= 16.0);
    const Image gray = decode_image(jpeg, "scan.jpg", 1);
    REQUIRE(gray.channels == 1);
    const double gray_mean = mean_abs_difference(gray.pixels, luma_of(rgb).pixels, worst);
    MESSAGE("-> gray: mean |diff| ", gray_mean, ", max ", worst);
    CHECK(gray_mean <= 2.0);
    // DCT-domain scaling works on CMYK too.
    const Image half = decode_image_scaled(jpeg, "scan.jpg", 3, 19, 12);
    CHECK(half.height == 19);
    CHECK(half.width == 12);
  }

  TEST_CASE("CMYK JPEG: fused decode + augment equals the three-step path bit for bit") {
    if (!have_turbojpeg()) return;
    const std::vector<uint8_t> jpeg =
        encode_jpeg_cmyk(adobe_cmyk_of(test_image(37, 23, 3)), 37, 23, 90);
    const std::vector<AugmentOptions> settings = {
        options_with(0, false, {}, {}), options_with(4, true, {0.5f}, {0.25f}),
        options_with(3, true, {0.4f, 0.5f, 0.6f}, {0.2f, 0.3f, 0.4f})};
    for (int channels : {1, 3}) check_fused_matches(jpeg, channels, settings);
  }

  TEST_CASE("CMYK JPEG with stb_image (builds without libjpeg-turbo): refused naming the file") {
    if (!have_stb() || !have_turbojpeg()) return;  // the encoder is libjpeg-turbo's
    const std::vector<uint8_t> jpeg =
        encode_jpeg_cmyk(adobe_cmyk_of(test_image(16, 16, 3)), 16, 16, 90);
    CHECK_THROWS_WITH_AS(decode_image(jpeg, "photos/cmyk.jpg", 3, ImageDecoder::Stb),
                         doctest::Contains("photos/cmyk.jpg: CMYK/YCCK JPEG needs libjpeg-turbo"),
                         echelon::Error);
  }

  TEST_CASE(
      "progressive JPEG through stb: every scan's Huffman tables are checked, not the first") {
    if (!have_stb()) return;
    // The committed fuzz seed (first byte: the harness's channel selector): 10 scans, with DHT
    // segments between them.
    const std::vector<uint8_t> seed =
        read_file(ECHELON_SOURCE_DIR "/tests/fuzz/corpus/diff_jpeg/seed-jpeg-progressive");
    const std::vector<uint8_t> jpeg(seed.begin() + 1, seed.end());
    // Scan headers: FF DA never occurs inside entropy-coded data (an FF there is followed by 00).
    std::vector<size_t> scans;
    for (size_t i = 0; i + 1 < jpeg.size(); ++i)
      if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA) scans.push_back(i);
    REQUIRE(scans.size() == 10);
    const Image reference = decode_image(jpeg, "p.jpg", 3, ImageDecoder::Stb);

    // The third scan (AC, one component, table 1) pointed at AC table 3, which the file never
    // defines: without the check stb_image decoded it with an empty table and no error.
    std::vector<uint8_t> missing_table = jpeg;
    REQUIRE(missing_table[scans[2] + 5] == 3);  // component id 3 (Cr)
    missing_table[scans[2] + 6] = 0x03;
    CHECK_THROWS_WITH_AS(
        decode_image(missing_table, "photos/p.jpg", 3, ImageDecoder::Stb),
        doctest::Contains(("photos/p.jpg: JPEG scan at offset " + std::to_string(scans[2]) +
                           " uses a Huffman table the file does not define")
                              .c_str()),
        echelon::Error);

    // The DC refinement scan (Ss = 0, Ah = 1) reads plain bits and no table: any DC table id
    // decodes the same pixels.
    std::vector<uint8_t> refinement = jpeg;
    const size_t dc_refine = scans[6];
    REQUIRE(refinement[dc_refine + 4] == 3);          // three components
    REQUIRE(refinement[dc_refine + 11] == 0);         // Ss = 0: a DC scan
    REQUIRE((refinement[dc_refine + 13] >> 4) == 1);  // Ah = 1: a refinement
    for (size_t k = 0; k < 3; ++k) refinement[dc_refine + 6 + 2 * k] = 0x30;
    CHECK(decode_image(refinement, "p.jpg", 3, ImageDecoder::Stb).pixels == reference.pixels);
  }

  TEST_CASE("JPEG through stb: a frame component that no scan decodes is refused") {
    if (!have_stb()) return;
    // 16 x 16, baseline, all-ones quantizer, one-symbol Huffman tables (DC category 0, AC EOB:
    // a zero bit each), then one scan of component 1 only: four blocks of 2 bits in one byte.
    const auto baseline = [](int components) {
      const auto segment = [](uint8_t marker, std::vector<uint8_t> body) {
        std::vector<uint8_t> out{0xFF, marker, 0, static_cast<uint8_t>(body.size() + 2)};
        out.insert(out.end(), body.begin(), body.end());
        return out;
      };
      std::vector<uint8_t> quant(65, 1), frame{8, 0, 16, 0, 16, static_cast<uint8_t>(components)};
      quant[0] = 0;
      for (int c = 1; c <= components; ++c)
        frame.insert(frame.end(), {static_cast<uint8_t>(c), 0x11, 0});
      std::vector<uint8_t> huffman;
      for (uint8_t table : {0x00, 0x10}) {  // DC table 0, AC table 0
        // The table id, 16 code counts (one code of length 1), its symbol: DC category 0 or EOB.
        std::vector<uint8_t> one_code(18, 0);
        one_code[0] = table;
        one_code[1] = 1;
        huffman.insert(huffman.end(), one_code.begin(), one_code.end());
      }
      std::vector<uint8_t> jpeg{0xFF, 0xD8};
      for (const auto& part : {segment(0xDB, quant), segment(0xC0, frame), segment(0xC4, huffman),
                               segment(0xDA, {1, 1, 0x00, 0, 63, 0})})
        jpeg.insert(jpeg.end(), part.begin(), part.end());
      jpeg.insert(jpeg.end(), {0x00, 0xFF, 0xD9});
      return jpeg;
    };
    const Image gray = decode_image(baseline(1), "gray.jpg", 1, ImageDecoder::Stb);
    CHECK(gray.pixels == std::vector<uint8_t>(256, 128));  // DC 0: mid-gray
    const std::vector<uint8_t> colour = baseline(3);
    const std::string unset = "cut.jpg: JPEG component 2 has no scan before offset " +
                              std::to_string(colour.size() - 2) +
                              ": stb_image would leave its pixels unset";
    CHECK_THROWS_WITH_AS(decode_image(colour, "cut.jpg", 3, ImageDecoder::Stb),
                         doctest::Contains(unset.c_str()), echelon::Error);
    // A progressive file cut after its DC scans decodes (blurred); its AC scans are optional.
    const std::vector<uint8_t> seed =
        read_file(ECHELON_SOURCE_DIR "/tests/fuzz/corpus/diff_jpeg/seed-jpeg-progressive");
    std::vector<uint8_t> dc_only(seed.begin() + 1, seed.end());
    size_t second_scan = 0;
    for (size_t i = 0, seen = 0; i + 1 < dc_only.size() && second_scan == 0; ++i)
      if (dc_only[i] == 0xFF && dc_only[i + 1] == 0xDA && ++seen == 2) second_scan = i;
    REQUIRE(second_scan > 0);
    REQUIRE(dc_only[dc_only.size() - 2] == 0xFF);
    dc_only.resize(second_scan);
    dc_only.insert(dc_only.end(), {0xFF, 0xD9});
    CHECK(decode_image(dc_only, "dc.jpg", 3, ImageDecoder::Stb).pixels.size() > 0);
  }

  // Run by tests/pillow_cmyk.sh (ctest pillow_cmyk), which has Pillow write the files first.
  TEST_CASE("CMYK JPEG written by Pillow decodes exactly as Pillow's convert()" * doctest::skip()) {
    const char* dir = std::getenv("ECHELON_PILLOW_CMYK_DIR");
    REQUIRE_MESSAGE(dir != nullptr, "run through tests/pillow_cmyk.sh");
    if (!have_turbojpeg()) return;
    const std::string root = dir;
    const std::vector<uint8_t> jpeg = echelon::data::read_file_raw(root + "/pillow_cmyk.jpg");
    REQUIRE(echelon::data::detail::read_jpeg_frame(jpeg).components == 4);
    const Image rgb = decode_image(jpeg, "pillow_cmyk.jpg", 3);
    const Image gray = decode_image(jpeg, "pillow_cmyk.jpg", 1);
    REQUIRE(rgb.height == 31);
    REQUIRE(rgb.width == 45);
    // Pillow's bytes are interleaved (H, W, C); ours planar.
    const std::vector<uint8_t> pillow_rgb = echelon::data::read_file_raw(root + "/pillow_rgb.raw");
    const std::vector<uint8_t> pillow_gray =
        echelon::data::read_file_raw(root + "/pillow_gray.raw");
    REQUIRE(pillow_rgb.size() == rgb.pixels.size());
    const int64_t pixels = rgb.height * rgb.width;
    std::vector<uint8_t> ours(pillow_rgb.size());
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t ch = 0; ch < 3; ++ch) ours[3 * p + ch] = rgb.pixels[ch * pixels + p];
    double worst = 0;
    const double mean = mean_abs_difference(ours, pillow_rgb, worst);
    MESSAGE("Echelon vs Pillow, CMYK JPEG -> RGB: mean |diff| ", mean, ", max ", worst);
    // Same libjpeg-turbo decode, same conversion formulas: equal (docs/data.md).
    CHECK(worst == 0);
    CHECK(gray.pixels == pillow_gray);
  }
}
