// Image decoding (stb_image; libjpeg-turbo for JPEG when built with it) and encoding (for tests
// and for the JPEG corpus the decode experiment writes). Availability depends on the build:
// ECHELON_WITH_STB (Debian libstb) and ECHELON_WITH_TURBOJPEG (libturbojpeg).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/data/dataset.h>

namespace echelon::data {

enum class ImageDecoder : uint8_t { Auto, Stb, TurboJpeg };

bool have_stb();
bool have_turbojpeg();
bool is_jpeg(const std::vector<uint8_t>& bytes);  // starts with FF D8 FF

// Decodes JPEG/PNG/BMP bytes to a (C, H, W) image with `channels` (1 or 3) channels. Auto =
// libjpeg-turbo for JPEG when available, stb_image otherwise. Corrupt or unsupported data throws
// echelon::Error naming `source` and the decoder's reason; a decoder missing from the build throws
// too.
Image decode_image(const std::vector<uint8_t>& bytes, const std::string& source, int channels,
                   ImageDecoder decoder = ImageDecoder::Auto);

// Encoders (stb_image_write) of a (C, H, W) image. Throw when the build has no stb.
std::vector<uint8_t> encode_png(const Image& image);
std::vector<uint8_t> encode_jpeg(const Image& image, int quality = 90);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace echelon::data
