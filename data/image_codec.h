// Image decoding (stb_image; libjpeg-turbo for JPEG when built with it) and encoding (for tests
// and for the JPEG corpus the decode experiment writes). Availability depends on the build:
// ECHELON_WITH_STB (Debian libstb) and ECHELON_WITH_TURBOJPEG (libturbojpeg).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/data/dataset.h>
#include <echelon/data/transforms.h>

namespace echelon::data {

enum class ImageDecoder : uint8_t { Auto, Stb, TurboJpeg };

bool have_stb();
bool have_turbojpeg();
bool is_jpeg(const std::vector<uint8_t>& bytes);  // starts with FF D8 FF

// Decodes JPEG/PNG/BMP bytes to a (C, H, W) image with `channels` (1 or 3) channels. Auto =
// libjpeg-turbo for every JPEG when the build has it (ONE JPEG decoder, so training sees the same
// pixels on every machine: stb and libjpeg-turbo differ, docs/fuzzing.md), stb_image for other
// formats and for JPEG only in builds without libjpeg-turbo. CMYK/YCCK JPEGs decode to RGB or gray
// as Pillow's convert() does (libjpeg-turbo; stb refuses them, its colours are wrong); 12-bit,
// lossless and hierarchical JPEGs are refused as "unsupported JPEG variant (...)" naming the file
// (both decoders). Corrupt or unsupported data throws
// echelon::Error naming `source` and the decoder's reason; a decoder missing from the build throws
// too.
Image decode_image(const std::vector<uint8_t>& bytes, const std::string& source, int channels,
                   ImageDecoder decoder = ImageDecoder::Auto);

// JPEG decoded at a reduced size in the DCT domain (libjpeg-turbo scaled IDCT, 1/2, 1/4 or 1/8):
// the smallest scale whose output is at least min_height x min_width. Much cheaper than a full
// decode when the consumer wants a small image; pixels differ from a full decode followed by a
// box filter by a bounded amount (tests/cpu/decode_test.cpp, docs/data.md). Other formats, or no
// libjpeg-turbo: the full-size decode_image.
Image decode_image_scaled(const std::vector<uint8_t>& bytes, const std::string& source,
                          int channels, int64_t min_height, int64_t min_width);

// decode_image + augment_image + to_float in one call, into `out` (C, H, W floats, resized) and
// the image's height and width. JPEG with libjpeg-turbo takes the fused path (a reused decoder per
// thread; crop, flip and normalise in one pass from the decoder's rows; returns true); anything
// else the three-step path (returns false). Both give bit-identical floats.
bool decode_augment_to_float(const std::vector<uint8_t>& bytes, const std::string& source,
                             int channels, const AugmentOptions& options, const AugmentKey& key,
                             std::vector<float>& out, int64_t& height, int64_t& width);

// Encoders (stb_image_write) of a (C, H, W) image. Throw when the build has no stb.
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90);
// A 4-component JPEG of (H, W, 4) interleaved Adobe-inverted CMYK pixels (255 = no ink), as
// libjpeg-turbo's compressor writes it: YCCK with an Adobe marker. For tests; throws in builds
// without libjpeg-turbo.
std::vector<uint8_t> encode_jpeg_cmyk(const std::vector<uint8_t>& cmyk_hwc, int64_t height,
                                      int64_t width, int quality = 95);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace echelon::data
