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

// Whether a marker starts a frame header: SOF0..SOF15 minus DHT (C4), JPG (C8) and DAC (CC).
bool is_sof(uint8_t marker);

// What a JPEG's frame header (SOFn) says, read by our own bounds-checked marker walk.
struct JpegFrame {
  uint8_t marker = 0;  // C0 baseline, C1 extended, C2 progressive, C3 lossless, ... (SOF0..SOF15)
  size_t offset = 0;   // of the SOF marker in the file
  int precision = 0;   // bits per sample: 8 (baseline/extended) or 12 (extended)
  int components = 0;  // 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool found = false;  // false: no SOF before the first scan (the decoder then rejects it)
};
JpegFrame read_jpeg_frame(const std::vector<uint8_t>& bytes);

// Refuses valid JPEG variants that this libjpeg-turbo (8-bit, DCT only) cannot decode, as
// "unsupported JPEG variant (12-bit precision)" / "(lossless)" / "(hierarchical)", naming the
// file and the SOF offset, so that they are never reported as corrupt files.
void check_jpeg_supported(const std::vector<uint8_t>& bytes, const std::string& source);

// Adobe CMYK (inverted: 255 = no ink, what Photoshop and Pillow write, and what libjpeg hands back
// for both CMYK and YCCK files) to RGB (channels 3) or gray (channels 1), exactly as Pillow's
// convert('RGB') / convert('L'): R = C * K / 255 rounded; gray = ITU-R 601 luma of that RGB.
// cmyk: (pixels, 4) interleaved; out: (pixels, channels).
void adobe_cmyk_to(const uint8_t* cmyk, int64_t pixels, int channels, uint8_t* out);

// Interleaved (H, W, C) pixels from libjpeg-turbo.
struct Interleaved {
  int height = 0, width = 0, channels = 0;
  const uint8_t* pixels = nullptr;  // valid until the thread's next decode
};

// The JPEG's full-size dimensions and colour model, from its header (libjpeg-turbo); throws
// naming `source`.
struct JpegHeader {
  int height = 0, width = 0;
  bool cmyk = false;  // 4 components (CMYK or YCCK): decoded to CMYK, then converted
};
JpegHeader read_jpeg_header(const std::vector<uint8_t>& bytes, const std::string& source);

// Decodes with this thread's reusable handle into this thread's buffer. `scale_denom` 1, 2, 4 or
// 8 decodes at 1/scale_denom of the size in the DCT domain (libjpeg-turbo's scaled IDCT; output
// dimensions are ceil(dim / scale_denom)). CMYK/YCCK files come out as RGB or gray like any other
// (adobe_cmyk_to). Errors (and libjpeg warnings) throw naming `source`.
Interleaved decode_jpeg_interleaved(const std::vector<uint8_t>& bytes, const std::string& source,
                                    int channels, int scale_denom = 1);

}  // namespace echelon::data::detail
