// libjpeg-turbo decoding shared by decode_image and the fused decode + augment path
// (data/jpeg_decode.cpp). Internal to the data layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace echelon::data::detail {

// Header dimensions must be >= 1 and at most 2^25 pixels (checked before any allocation).
void check_image_dimensions(int64_t width, int64_t height, const std::string& source,
                            const char* format);

// What a JPEG's frame header (SOFn) says, read by our own bounds-checked marker walk.
struct JpegFrame {
  int precision = 0;   // bits per sample: 8 (baseline/extended) or 12 (extended)
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool found = false;  // false: no SOF before the first scan (the decoder then rejects it)
};
JpegFrame read_jpeg_frame(const std::vector<uint8_t>& bytes);

// Refuses what we cannot decode faithfully, naming the file and the SOF offset: 12-bit samples
// (this libjpeg-turbo is built for 8-bit) and 4-component (CMYK/YCCK) images, which would
// otherwise decode to wrong colours or fail with a cryptic message.
void check_jpeg_supported(const std::vector<uint8_t>& bytes, const std::string& source);

// Interleaved (H, W, C) pixels from libjpeg-turbo.
struct Interleaved {
  int height = 0, width = 0, channels = 0;
  const uint8_t* pixels = nullptr;  // valid until the thread's next decode
};

// The JPEG's full-size dimensions, from its header (libjpeg-turbo); throws naming `source`.
void jpeg_dimensions(const std::vector<uint8_t>& bytes, const std::string& source, int& height,
                     int& width);

// Decodes with this thread's reusable handle into this thread's buffer. `scale_denom` 1, 2, 4 or
// 8 decodes at 1/scale_denom of the size in the DCT domain (libjpeg-turbo's scaled IDCT; output
// dimensions are ceil(dim / scale_denom)). Errors (and libjpeg warnings) throw naming `source`.
Interleaved decode_jpeg_interleaved(const std::vector<uint8_t>& bytes, const std::string& source,
                                    int channels, int scale_denom = 1);

}  // namespace echelon::data::detail
