// Differential: the same JPEG bytes decoded by libjpeg-turbo and by stb_image (both decoders the
// image-folder data set can use, data/image_codec.cpp). Each follows the contract on its own.
// When both accept, the dimensions must agree and the pixels must be within kMeanTolerance
// (mean absolute difference, 0..255 scale): the two differ only in IDCT and chroma upsampling
// rounding. Acceptance itself may differ (stb has no arithmetic coding; libjpeg-turbo stops on
// any warning), so a one-sided rejection is not a finding.
#include "fuzz_common.h"

#include <cmath>
#include <cstdlib>

#include <echelon/data/image_codec.h>

namespace {
constexpr double kMeanTolerance = 8.0;
}

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
  double total = 0;
  for (size_t i = 0; i < turbo.pixels.size(); ++i)
    total += std::abs(int{turbo.pixels[i]} - int{stb.pixels[i]});
  const double mean = turbo.pixels.empty() ? 0 : total / static_cast<double>(turbo.pixels.size());
  if (mean > kMeanTolerance)
    fuzz::finding("libjpeg-turbo and stb pixels differ by " + std::to_string(mean) + " on average");
  return 0;
}
