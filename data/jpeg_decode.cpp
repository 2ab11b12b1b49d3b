// libjpeg-turbo decoding and the fused decode + crop + flip + normalise path.
//
// Why it is faster than decode_image + augment_image + to_float (bench/exp_decode):
//  - one pixel buffer per thread, reused: no allocation per image (the tjhandle is not reused:
//    a libjpeg decompressor keeps tables from image to image, see decode_jpeg_interleaved);
//  - the decoder's interleaved (H, W, C) rows are cropped, flipped, converted to float and
//    normalised into the (C, H, W) output in ONE pass: no planar uint8 copy, no augmented copy;
//  - optional DCT-domain downscaling (1/2, 1/4, 1/8) when the consumer wants a smaller image.
#include <echelon/data/jpeg_decode.h>

#include <algorithm>
#include <memory>

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/transforms.h>

#ifdef ECHELON_WITH_TURBOJPEG
#include <turbojpeg.h>
#endif

namespace echelon::data {
namespace detail {

namespace {
bool is_sof(uint8_t marker) {  // SOF0..SOF15 minus DHT (C4), JPG (C8) and DAC (CC)
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}
}  // namespace

JpegFrame read_jpeg_frame(const std::vector<uint8_t>& bytes) {
  JpegFrame frame;
  size_t i = 2;  // after SOI
  while (i + 4 <= bytes.size()) {
    if (bytes[i] != 0xFF) return frame;  // not a marker: the decoder reports the corruption
    const uint8_t marker = bytes[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return frame;  // scan or end: no frame header before
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {  // markers without a length
      i += 2;
      continue;
    }
    const size_t length = size_t{bytes[i + 2]} << 8 | bytes[i + 3];
    if (is_sof(marker) && length >= 8 && i + 10 <= bytes.size()) {
      frame.precision = bytes[i + 4];
      frame.components = bytes[i + 9];
      frame.found = true;
      return frame;
    }
    i += 2 + std::max<size_t>(length, 2);
  }
  return frame;
}

void check_jpeg_supported(const std::vector<uint8_t>& bytes, const std::string& source) {
  const JpegFrame frame = read_jpeg_frame(bytes);
  if (!frame.found) return;
  ECH_CHECK(frame.precision == 8, source, ": ", frame.precision,
            "-bit JPEG is not supported (only 8-bit samples; convert the file to 8-bit)");
  ECH_CHECK(frame.components != 4, source,
            ": CMYK/YCCK JPEG (4 components) is not supported; convert the file to RGB");
}

#ifdef ECHELON_WITH_TURBOJPEG
namespace {
// Per thread: a handle for headers, one for pixels, and the pixel buffer. A TurboJPEG handle
// carries state from call to call (warning flags, and the Huffman/quantisation tables of the
// images it read; found by diff_jpeg: the same file was accepted or rejected depending on the file
// before it), so each handle serves one kind of call for one image and is then replaced. A
// decode's outcome depends on its own bytes only, never on the thread's history.
using Handle = std::unique_ptr<void, int (*)(tjhandle)>;
struct ThreadDecoder {
  Handle header{nullptr, &tjDestroy};
  Handle pixels{nullptr, &tjDestroy};
  std::vector<uint8_t> buffer;
};
ThreadDecoder& thread_decoder() {
  thread_local ThreadDecoder decoder;
  return decoder;
}
tjhandle fresh_if_needed(Handle& handle, const std::string& source) {
  if (handle == nullptr) handle.reset(tjInitDecompress());
  ECH_CHECK(handle != nullptr, source, ": libjpeg-turbo init failed");
  return handle.get();
}
// Throws naming `source` with the handle's message, after retiring the handle.
[[noreturn]] void fail(Handle& handle, const std::string& source, const char* what) {
  const std::string reason = tjGetErrorStr2(handle.get());
  handle.reset();
  ECH_FAIL(source, ": ", what, " (libjpeg-turbo: ", reason, ")");
}
}  // namespace
#endif

void jpeg_dimensions(const std::vector<uint8_t>& bytes, const std::string& source, int& height,
                     int& width) {
#ifdef ECHELON_WITH_TURBOJPEG
  check_jpeg_supported(bytes, source);
  ThreadDecoder& decoder = thread_decoder();
  tjhandle handle = fresh_if_needed(decoder.header, source);
  int subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, bytes.data(), bytes.size(), &width, &height, &subsampling,
                          &colorspace) != 0)
    fail(decoder.header, source, "corrupt JPEG header");
  decoder.header.reset();  // see decode_jpeg_interleaved: no tables may carry over
  check_image_dimensions(width, height, source, "JPEG");
#else
  (void)bytes;
  height = width = 0;
  ECH_FAIL(source, ": cannot decode: this build has no libjpeg-turbo (ECHELON_WITH_TURBOJPEG)");
#endif
}

Interleaved decode_jpeg_interleaved(const std::vector<uint8_t>& bytes, const std::string& source,
                                    int channels, int scale_denom) {
  ECH_CHECK(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8, source,
            ": JPEG scale 1/", scale_denom, " is not one of 1, 1/2, 1/4, 1/8");
  int width = 0, height = 0;
  jpeg_dimensions(bytes, source, height, width);
#ifdef ECHELON_WITH_TURBOJPEG
  ThreadDecoder& decoder = thread_decoder();
  tjhandle handle = fresh_if_needed(decoder.pixels, source);
  const tjscalingfactor factor{1, scale_denom};
  const int out_w = TJSCALED(width, factor), out_h = TJSCALED(height, factor);
  decoder.buffer.resize(static_cast<size_t>(out_w) * out_h * channels);
  // Warnings (e.g. premature end of data) are errors here: a truncated file must not pass.
  if (tjDecompress2(handle, bytes.data(), bytes.size(), decoder.buffer.data(), out_w, 0, out_h,
                    channels == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) != 0)
    fail(decoder.pixels, source, "corrupt JPEG data");
  // A libjpeg decompressor keeps the Huffman and quantisation tables of the images it has read,
  // and uses them for a later image that lacks its own (an "abbreviated" datastream): a corrupt
  // file would then decode or not depending on the file before it (found by fuzz_diff_jpeg's
  // replay). So a handle serves one image; the pixel buffer is still reused.
  decoder.pixels.reset();
  return {out_h, out_w, channels, decoder.buffer.data()};
#else
  (void)channels;
  return {};
#endif
}

}  // namespace detail

namespace {

// A pixel loop, not parsing: kept out of libFuzzer's comparison tracing (as in image_codec.cpp).
#if defined(__clang__)
#define ECHELON_NO_FUZZ_COVERAGE __attribute__((no_sanitize("coverage")))
#else
#define ECHELON_NO_FUZZ_COVERAGE
#endif

// Crop (with zero padding), flip and normalise interleaved rows into planar floats, one pass.
// Produces exactly what augment_image + to_float produce on the planar image: the same
// coefficients (normalise_coefficients), the same expression per pixel, padding = 0 * scale +
// shift.
ECHELON_NO_FUZZ_COVERAGE
void augment_interleaved_to_float(const detail::Interleaved& image, const AugmentOptions& options,
                                  const AugmentKey& key, float* out) {
  const int64_t h = image.height, w = image.width, c = image.channels;
  const int64_t pad = options.crop_padding;
  const AugmentDraw draw = draw_augment(options, key);
  const NormaliseCoefficients coeffs = normalise_coefficients(options, c);
  for (int64_t ch = 0; ch < c; ++ch) {
    const float scale = coeffs.scale[ch], shift = coeffs.shift[ch];
    const float padding = 0.0f * scale + shift;
    float* plane = out + ch * h * w;
    for (int64_t y = 0; y < h; ++y) {
      float* row = plane + y * w;
      const int64_t src_y = y + draw.dy - pad;
      if (src_y < 0 || src_y >= h) {
        std::fill(row, row + w, padding);
        continue;
      }
      const uint8_t* src = image.pixels + src_y * w * c + ch;
      // Output column x reads source column (flip ? w-1-x : x) + dx - pad; keep it in [0, w).
      const int64_t offset = draw.dx - pad;
      for (int64_t x = 0; x < w; ++x) {
        const int64_t src_x = (draw.flip ? w - 1 - x : x) + offset;
        row[x] = (src_x >= 0 && src_x < w) ? static_cast<float>(src[src_x * c]) * scale + shift
                                           : padding;
      }
    }
  }
}

}  // namespace

bool decode_augment_to_float(const std::vector<uint8_t>& bytes, const std::string& source,
                             int channels, const AugmentOptions& options, const AugmentKey& key,
                             std::vector<float>& out, int64_t& height, int64_t& width) {
  ECH_CHECK(channels == 1 || channels == 3, source, ": channels must be 1 or 3, got ", channels);
  ECH_CHECK(options.crop_padding >= 0, "augment: crop_padding ", options.crop_padding, " < 0");
  ECH_CHECK(!bytes.empty(), source, ": empty image file");
  if (!have_turbojpeg() || !is_jpeg(bytes)) {  // the general path, same result
    const Image image = augment_image(decode_image(bytes, source, channels), options, key);
    out.resize(static_cast<size_t>(image.numel()));
    to_float(image, options, out.data());
    height = image.height;
    width = image.width;
    return false;
  }
  const detail::Interleaved image = detail::decode_jpeg_interleaved(bytes, source, channels);
  out.resize(static_cast<size_t>(image.height) * image.width * channels);
  augment_interleaved_to_float(image, options, key, out.data());
  height = image.height;
  width = image.width;
  return true;
}

}  // namespace echelon::data
