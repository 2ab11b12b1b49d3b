// Differential: the same JPEG bytes through every JPEG path Echelon has.
//
// Echelon decodes JPEG with ONE decoder, libjpeg-turbo (stb only in builds without it), so that
// training sees the same pixels on every machine. What is asserted, on every input:
//  1. libjpeg-turbo through two of our APIs — decode_image (tjDecompress2 -> planar uint8, then
//     augment_image + to_float) and decode_augment_to_float (the fused one-pass path the data
//     pipeline uses) — accepts and rejects alike and gives bit-identical floats, for the crop and
//     flip drawn from the input;
//  2. libjpeg-turbo vs stb_image: when both accept, the same dimensions. One-sided rejection is
//     allowed (stb has no arithmetic coding; libjpeg-turbo stops on any warning).
// stb vs libjpeg-turbo PIXELS are not a contract (docs/fuzzing.md): the two IDCTs and upsamplers
// legitimately render some legal files far apart (36.6/255 seen). ECHELON_FUZZ_JPEG_PIXELS=1
// still measures it, for a debugger, on non-progressive files with valid Huffman tables.
#include "fuzz_common.h"

#include <cmath>
#include <cstdlib>

#include <echelon/data/image_codec.h>
#include <echelon/data/jpeg_decode.h>
#include <echelon/data/transforms.h>

namespace {
// Diagnostic only (ECHELON_FUZZ_JPEG_PIXELS=1). Mean absolute difference (of 255). Clean photos
// differ by ~1; legal files with extreme quantization tables (a luma quantizer of 164 found by
// fuzzing) saturate the two IDCTs differently, 12-14 seen; a channel swap, transposition or wrong
// colour conversion is far above.
constexpr double kMeanTolerance = 32.0;

// Whether every Huffman table (DHT) holds only symbols the JPEG spec allows: DC sizes <= 11; AC
// run/size pairs with size 1..10, or 0x00 (EOB) and 0xF0 (ZRL). Neither decoder checks this, and
// each decodes such symbols its own way, so pixels are compared only for valid tables.
// Progressive JPEGs (SOF2) are left out too: on corrupt refinement scans that neither decoder
// detects they differ by design (13.6 of 255 on average seen), so only the dimensions are compared.
bool huffman_tables_valid(const std::vector<uint8_t>& b) {
  size_t i = 2;
  while (i + 4 <= b.size() && b[i] == 0xFF) {
    const uint8_t marker = b[i + 1];
    if (marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE) return false;
    if (marker == 0xDA || marker == 0xD9) return true;  // start of scan: tables are all read
    const size_t length = size_t{b[i + 2]} << 8 | b[i + 3];
    if (length < 2 || i + 2 + length > b.size()) return true;  // the decoders judge this one
    if (marker == 0xC4) {
      size_t at = i + 4;
      const size_t end = i + 2 + length;
      while (at + 17 <= end) {
        const bool ac = (b[at] >> 4) != 0;
        size_t count = 0;
        for (int k = 1; k <= 16; ++k) count += b[at + k];
        if (at + 17 + count > end) return true;
        for (size_t k = 0; k < count; ++k) {
          const uint8_t symbol = b[at + 17 + k];
          const int bits = symbol & 15;
          if (!ac ? symbol > 11 : !(symbol == 0x00 || symbol == 0xF0 || (bits >= 1 && bits <= 10)))
            return false;
        }
        at += 17 + count;
      }
    }
    i += 2 + length;
  }
  return true;
}

}  // namespace

namespace {

namespace ed = echelon::data;

// Contract 1: the fused path and the three-step path of libjpeg-turbo agree exactly.
void check_turbo_two_apis(const std::vector<uint8_t>& bytes, const std::string& source,
                          int channels, uint8_t augment_byte) {
  ed::AugmentOptions options;
  options.crop_padding = augment_byte % 5;
  options.horizontal_flip = (augment_byte & 8) != 0;
  const ed::AugmentKey key{augment_byte, 0, augment_byte >> 4, 0};
  std::vector<float> three_step, fused;
  bool three_step_ok = false, fused_ok = false;
  echelon::fuzz::expect_parse_or_error(source, [&] {
    // What the fused path does with a file that is not a JPEG: the general decoder (stb).
    const ed::ImageDecoder decoder =
        ed::is_jpeg(bytes) ? ed::ImageDecoder::TurboJpeg : ed::ImageDecoder::Auto;
    const ed::Image image =
        ed::augment_image(ed::decode_image(bytes, source, channels, decoder), options, key);
    three_step.resize(static_cast<size_t>(image.numel()));
    ed::to_float(image, options, three_step.data());
    three_step_ok = true;
  });
  echelon::fuzz::expect_parse_or_error(source, [&] {
    int64_t height = 0, width = 0;
    ed::decode_augment_to_float(bytes, source, channels, options, key, fused, height, width);
    fused_ok = true;
  });
  if (three_step_ok != fused_ok)
    echelon::fuzz::finding(std::string("libjpeg-turbo: the fused path ") +
                           (fused_ok ? "accepts" : "rejects") + " what decode_image " +
                           (three_step_ok ? "accepts" : "rejects"));
  if (three_step_ok && three_step != fused)
    echelon::fuzz::finding(
        "libjpeg-turbo: fused decode + augment differs from the three-step path");
}

// Whether the image holds more than 2^20 pixels, the most this target compares (libjpeg-turbo's
// own fuzzers stop at the same count). Every path here is a pass over the pixels, several of them
// at -O0 in the fuzz build, so a large image costs time in loops, not in parsing: an
// arithmetic-coded JPEG of 5000 x 5000 pixels fits in 191 bytes and took 12 CPU-s (a timeout in
// CI's 60 s step, stop 27); a 366-byte TGA of 30 Mpixels took 8. The `image` target still decodes
// images up to the 2^25-pixel budget. A JPEG's size comes from its header; other files (the fused
// path's fallback to stb) are decoded to learn it.
bool too_large_to_compare(const std::vector<uint8_t>& bytes, const std::string& source,
                          int channels) {
  constexpr int64_t kMostPixels = int64_t{1} << 20;
  try {
    if (ed::is_jpeg(bytes)) {
      const ed::detail::JpegHeader header = ed::detail::read_jpeg_header(bytes, source);
      return int64_t{header.width} * header.height > kMostPixels;
    }
    const ed::Image image = ed::decode_image(bytes, source, channels, ed::ImageDecoder::Auto);
    return image.height * image.width > kMostPixels;
  } catch (const echelon::Error&) {
    return false;  // refused: every path must refuse it alike, which is cheap to check
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  if (!ed::have_stb() || !ed::have_turbojpeg() || size < 1) return 0;
  const int channels = data[0] & 1 ? 1 : 3;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  const std::string source = "fuzz/diff.jpg";
  if (too_large_to_compare(bytes, source, channels)) return 0;
  // Only JPEG takes the fused libjpeg-turbo path; other bytes go to stb there (Auto), which must
  // equal decode_image + augment_image + to_float just the same.
  check_turbo_two_apis(bytes, source, channels, data[0]);
  ed::Image turbo, stb;
  bool turbo_ok = false, stb_ok = false;
  fuzz::expect_parse_or_error(source, [&] {
    turbo = ed::decode_image(bytes, source, channels, ed::ImageDecoder::TurboJpeg);
    turbo_ok = true;
  });
  // stb is only the yardstick for files libjpeg-turbo (the decoder Echelon trains with) accepts:
  // Debian's stb_image aborts on an assert for some malformed JPEGs (found by this target in CI,
  // corpus crash-stb-assert), which is stb's bug and not reachable in training.
  if (!turbo_ok) return 0;
  fuzz::expect_parse_or_error(source, [&] {
    stb = ed::decode_image(bytes, source, channels, ed::ImageDecoder::Stb);
    stb_ok = true;
  });
  if (!stb_ok) return 0;
  fuzz::branch_on_pixels(turbo.pixels);  // for valgrind (label valgrind): no pixel left unset
  fuzz::branch_on_pixels(stb.pixels);
  if (turbo.height != stb.height || turbo.width != stb.width || turbo.channels != stb.channels)
    fuzz::finding("libjpeg-turbo and stb disagree on the dimensions");
  if (std::getenv("ECHELON_FUZZ_JPEG_PIXELS") != nullptr && huffman_tables_valid(bytes)) {
    const double mean = echelon::fuzz::mean_abs_difference(turbo.pixels, stb.pixels);
    if (mean > kMeanTolerance)
      fuzz::finding("libjpeg-turbo and stb pixels differ by " + std::to_string(mean) +
                    " on average");
  }
  return 0;
}
