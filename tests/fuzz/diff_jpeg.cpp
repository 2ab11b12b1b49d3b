// Differential: the same JPEG bytes decoded by libjpeg-turbo and by stb_image (both decoders the
// image-folder data set can use, data/image_codec.cpp). Each follows the contract on its own.
// When both accept, the dimensions must agree. Pixels within kMeanTolerance (mean absolute
// difference, 0..255) are checked only with ECHELON_FUZZ_JPEG_PIXELS=1: fuzzing found legal files
// the two decoders render far apart (IDCT saturation, upsampling), so it is not a CI contract.
// Acceptance itself may differ (stb has no arithmetic coding; libjpeg-turbo stops on any warning),
// so a one-sided rejection is not a finding.
#include "fuzz_common.h"

#include <cmath>
#include <cstdlib>

#include <echelon/data/image_codec.h>

namespace {
// Mean absolute difference allowed (of 255). Clean photos differ by ~1; legal files with extreme
// quantization tables (a luma quantizer of 164 found by fuzzing) saturate the two IDCTs
// differently, 12-14 seen; a channel swap, transposition or wrong colour conversion is far above.
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

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
  if (!ed::have_stb() || !ed::have_turbojpeg() || size < 1) return 0;
  const int channels = data[0] & 1 ? 1 : 3;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  const std::string source = "fuzz/diff.jpg";
  ed::Image turbo, stb;
  bool turbo_ok = false, stb_ok = false;
  fuzz::expect_parse_or_error(source, [&] {
    turbo = ed::decode_image(bytes, source, channels, ed::ImageDecoder::TurboJpeg);
    turbo_ok = true;
  });
  fuzz::expect_parse_or_error(source, [&] {
    stb = ed::decode_image(bytes, source, channels, ed::ImageDecoder::Stb);
    stb_ok = true;
  });
  if (!turbo_ok || !stb_ok) return 0;
  if (turbo.height != stb.height || turbo.width != stb.width || turbo.channels != stb.channels)
    fuzz::finding("libjpeg-turbo and stb disagree on the dimensions");
  // Pixels are NOT asserted (open, docs/fuzzing.md): on legal fuzzed files the two decoders
  // differ by up to 36.6/255 on average (crash-divergence-36, crash-extreme-quant-table), beyond
  // any tolerance that would still mean "the same image". The measure stays, for a debugger.
  if (std::getenv("ECHELON_FUZZ_JPEG_PIXELS") != nullptr && huffman_tables_valid(bytes)) {
    const double mean = echelon::fuzz::mean_abs_difference(turbo.pixels, stb.pixels);
    if (mean > kMeanTolerance)
      fuzz::finding("libjpeg-turbo and stb pixels differ by " + std::to_string(mean) +
                    " on average");
  }
  return 0;
}
