// Compiled optimised in every build type (CMakeLists.txt): every decoded image passes through
// here, also in the Debug sanitizer and fuzz builds, where at -O0 a 2^25-pixel RGB image spent
// 1.1 of its 1.5 CPU-s in to_planar (the `image` target's timeout is 2 s).
#include <echelon/data/pixel_layout.h>

namespace echelon::data::detail {

ECHELON_NO_FUZZ_COVERAGE
std::vector<uint8_t> to_planar(const uint8_t* hwc, int64_t h, int64_t w, int64_t c) {
  // Unsigned indices: no signed-overflow check per pixel under UBSan.
  const size_t plane = static_cast<size_t>(h * w), channels = static_cast<size_t>(c);
  std::vector<uint8_t> chw(plane * channels);
  for (size_t ch = 0; ch < channels; ++ch) {
    uint8_t* out = chw.data() + ch * plane;
    const uint8_t* in = hwc + ch;
    for (size_t p = 0; p < plane; ++p) out[p] = in[p * channels];
  }
  return chw;
}

ECHELON_NO_FUZZ_COVERAGE
std::vector<uint8_t> to_interleaved(const Image& image) {
  const size_t plane = static_cast<size_t>(image.height * image.width),
               channels = static_cast<size_t>(image.channels);
  std::vector<uint8_t> hwc(image.pixels.size());
  for (size_t ch = 0; ch < channels; ++ch) {
    const uint8_t* in = image.pixels.data() + ch * plane;
    uint8_t* out = hwc.data() + ch;
    for (size_t p = 0; p < plane; ++p) out[p * channels] = in[p];
  }
  return hwc;
}

}  // namespace echelon::data::detail
