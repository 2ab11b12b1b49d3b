// libjpeg-turbo decoding and the fused decode + crop + flip + normalise path.
//
// Why it is faster than decode_image + augment_image + to_float (bench/exp_decode):
//  - one pixel buffer per thread, reused: no allocation per image (the tjhandle is not reused:
//    a libjpeg decompressor keeps tables from image to image, see decode_jpeg_interleaved);
//  - the decoder's interleaved (H, W, C) rows are cropped, flipped, converted to float and
//    normalised into the (C, H, W) output in ONE pass: no planar uint8 copy, no augmented copy;
//  - optional DCT-domain downscaling (1/2, 1/4, 1/8) when the consumer wants a smaller image.
#include <echelon/data/jpeg_decode.h>
#include <echelon/data/pixel_layout.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>
#include <echelon/data/transforms.h>

#ifdef ECHELON_WITH_TURBOJPEG
#include <turbojpeg.h>
#endif

namespace echelon::data {
namespace detail {

bool is_sof(uint8_t marker) {
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

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
      frame.marker = marker;
      frame.offset = i;
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
  // SOF3/7/11/15: lossless; SOF5/6/13/14: hierarchical (differential) DCT. libjpeg-turbo 2.1
  // decodes neither; the checks come before the precision one because lossless files may be 8-bit.
  const uint8_t process = frame.marker & 0x0F;
  const bool lossless = process == 3 || process == 7 || process == 11 || process == 15;
  ECH_CHECK(!lossless, source, ": unsupported JPEG variant (lossless, SOF marker at offset ",
            frame.offset, "); convert the file to a baseline JPEG or PNG");
  ECH_CHECK(!(process == 5 || process == 6 || process == 13 || process == 14), source,
            ": unsupported JPEG variant (hierarchical, SOF marker at offset ", frame.offset,
            "); convert the file to a baseline JPEG");
  ECH_CHECK(frame.precision == 8, source, ": unsupported JPEG variant (", frame.precision,
            "-bit precision, SOF marker at offset ", frame.offset,
            "); only 8-bit samples are decoded, convert the file to 8-bit");
}

ECHELON_NO_FUZZ_COVERAGE
void adobe_cmyk_to(const uint8_t* cmyk, int64_t pixels, int channels, uint8_t* out) {
  for (int64_t p = 0; p < pixels; ++p) {
    const uint8_t* in = cmyk + 4 * p;
    const int k = in[3];
    uint8_t rgb[3];
    for (int ch = 0; ch < 3; ++ch) rgb[ch] = static_cast<uint8_t>((in[ch] * k + 127) / 255);
    if (channels == 3) {
      std::copy(rgb, rgb + 3, out + 3 * p);
    } else {  // Pillow's L24 fixed point: 0.299 R + 0.587 G + 0.114 B, rounded
      out[p] =
          static_cast<uint8_t>((rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16);
    }
  }
}

#ifdef ECHELON_WITH_TURBOJPEG
namespace {
// Per thread: a handle for headers, one for pixels, and the pixel buffers. A TurboJPEG handle
// carries state from call to call (warning flags, and the Huffman/quantisation tables of the
// images it read; found by diff_jpeg: the same file was accepted or rejected depending on the file
// before it), so each handle serves one kind of call for one image and is then replaced. A
// decode's outcome depends on its own bytes only, never on the thread's history.
using Handle = std::unique_ptr<void, int (*)(tjhandle)>;
struct ThreadDecoder {
  Handle header{nullptr, &tjDestroy};
  Handle pixels{nullptr, &tjDestroy};
  std::vector<uint8_t> buffer;
  std::vector<uint8_t> cmyk;  // a CMYK/YCCK file's pixels before conversion to RGB/gray
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

JpegHeader read_jpeg_header(const std::vector<uint8_t>& bytes, const std::string& source) {
#ifdef ECHELON_WITH_TURBOJPEG
  check_jpeg_supported(bytes, source);
  ThreadDecoder& decoder = thread_decoder();
  tjhandle handle = fresh_if_needed(decoder.header, source);
  JpegHeader header;
  int subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(handle, bytes.data(), bytes.size(), &header.width, &header.height,
                          &subsampling, &colorspace) != 0)
    fail(decoder.header, source, "corrupt JPEG header");
  decoder.header.reset();  // see decode_jpeg_interleaved: no tables may carry over
  check_image_dimensions(header.width, header.height, source, "JPEG");
  header.cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  return header;
#else
  (void)bytes;
  ECH_FAIL(source, ": cannot decode: this build has no libjpeg-turbo (ECHELON_WITH_TURBOJPEG)");
#endif
}

Interleaved decode_jpeg_interleaved(const std::vector<uint8_t>& bytes, const std::string& source,
                                    int channels, int scale_denom) {
  ECH_CHECK(scale_denom == 1 || scale_denom == 2 || scale_denom == 4 || scale_denom == 8, source,
            ": JPEG scale 1/", scale_denom, " is not one of 1, 1/2, 1/4, 1/8");
  const JpegHeader header = read_jpeg_header(bytes, source);
#ifdef ECHELON_WITH_TURBOJPEG
  ThreadDecoder& decoder = thread_decoder();
  tjhandle handle = fresh_if_needed(decoder.pixels, source);
  const tjscalingfactor factor{1, scale_denom};
  const int out_w = TJSCALED(header.width, factor), out_h = TJSCALED(header.height, factor);
  const size_t pixels = static_cast<size_t>(out_w) * out_h;
  decoder.buffer.resize(pixels * channels);
  // libjpeg-turbo converts CMYK/YCCK to CMYK only; the conversion to RGB/gray is ours.
  std::vector<uint8_t>& target = header.cmyk ? decoder.cmyk : decoder.buffer;
  if (header.cmyk) target.resize(pixels * 4);
  const int format = header.cmyk ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  // Warnings (e.g. premature end of data) are errors here: a truncated file must not pass.
  if (tjDecompress2(handle, bytes.data(), bytes.size(), target.data(), out_w, 0, out_h, format,
                    TJFLAG_STOPONWARNING) != 0)
    fail(decoder.pixels, source, "corrupt JPEG data");
  if (header.cmyk)
    adobe_cmyk_to(decoder.cmyk.data(), static_cast<int64_t>(pixels), channels,
                  decoder.buffer.data());
  // A libjpeg decompressor keeps the Huffman and quantisation tables of the images it has read,
  // and uses them for a later image that lacks its own (an "abbreviated" datastream): a corrupt
  // file would then decode or not depending on the file before it (found by fuzz_diff_jpeg's
  // replay). So a handle serves one image; the pixel buffer is still reused.
  decoder.pixels.reset();
  return {out_h, out_w, channels, decoder.buffer.data()};
#else
  (void)header;
  (void)channels;
  return {};
#endif
}

}  // namespace detail

std::vector<uint8_t> encode_jpeg_cmyk(const std::vector<uint8_t>& cmyk_hwc, int64_t height,
                                      int64_t width, int quality) {
  ECH_CHECK(height > 0 && width > 0 && width <= (1 << 16) && height <= (1 << 16) &&
                static_cast<int64_t>(cmyk_hwc.size()) == height * width * 4,
            "encode_jpeg_cmyk: bad image ", height, "x", width, "x4 with ", cmyk_hwc.size(),
            " bytes");
#ifdef ECHELON_WITH_TURBOJPEG
  std::unique_ptr<void, int (*)(tjhandle)> handle(tjInitCompress(), &tjDestroy);
  ECH_CHECK(handle != nullptr, "encode_jpeg_cmyk: libjpeg-turbo init failed");
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int status =
      tjCompress2(handle.get(), cmyk_hwc.data(), static_cast<int>(width), 0,
                  static_cast<int>(height), TJPF_CMYK, &jpeg, &size, TJSAMP_444, quality, 0);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(jpeg, &tjFree);
  ECH_CHECK(status == 0, "encode_jpeg_cmyk: ", tjGetErrorStr2(handle.get()));
  return {jpeg, jpeg + size};
#else
  (void)quality;
  ECH_FAIL("encode_jpeg_cmyk: this build has no libjpeg-turbo (ECHELON_WITH_TURBOJPEG)");
#endif
}

namespace {

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
  // The general path, same result; a square crop (--resize) changes the size, so it goes there too.
  if (!have_turbojpeg() || !is_jpeg(bytes) || options.crop_to > 0) {
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
