// Differential: PNG bytes decoded by our decoder (decode_image, stb_image behind it) and by
// libpng (which checks every chunk CRC). Contract: our decoder never accepts a file libpng
// rejects (a damaged file must not be trained on); when both accept, dimensions and pixels agree
// exactly for 8-bit images without alpha (PNG is lossless; 16-bit and alpha conversions differ by
// design between the two). Our decoder rejecting a file libpng accepts is allowed (stb supports
// less), not a finding.
#include "fuzz_common.h"

#ifdef ECHELON_FUZZ_WITH_PNG
#include <png.h>
#endif

#include <cstring>

#include <echelon/data/image_codec.h>
#include <echelon/data/io.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
#ifdef ECHELON_FUZZ_WITH_PNG
  if (size < 1) return 0;
  const int channels = data[0] & 1 ? 1 : 3;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  if (bytes.size() < 8 || std::memcmp(bytes.data(), "\x89PNG\r\n\x1a\n", 8) != 0) return 0;
  const std::string source = "fuzz/diff.png";
  ed::Image ours;
  bool ours_ok = false;
  fuzz::expect_parse_or_error(source, [&] {
    ours = ed::decode_image(bytes, source, channels);
    ours_ok = true;
  });

  // libpng allocates what a chunk header claims (1 GB seen): only hand it files whose chunks fit
  // in the input; one that does not is malformed, and our decoder must reject it too. That holds
  // for the last chunk as well, whose 8-byte header may be all the file has left of it (a
  // 1 GB tEXt claimed by the last 10 bytes: oom-libpng-chunk-cut-after-header).
  bool chunks_fit = true;
  for (size_t at = 8; at + 8 <= bytes.size();) {
    const uint64_t length = echelon::data::read_be32(bytes.data() + at);
    if (at + 12 + length > bytes.size()) {
      chunks_fit = false;
      break;
    }
    if (std::memcmp(bytes.data() + at + 4, "IEND", 4) == 0) break;  // decoders stop here
    at += 12 + length;
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  bool png_ok = false;
  std::vector<uint8_t> pixels;
  png_uint_32 original_format = 0;
  const bool begun =
      chunks_fit && png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) != 0;
  bool within_budget = true;
  if (begun) {
    original_format = image.format;
    image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    // A 4-Mpixel budget for the reference (libpng allocates whatever the header says).
    within_budget = uint64_t{image.width} * image.height <= (uint64_t{1} << 22);
    if (within_budget) {
      pixels.resize(PNG_IMAGE_SIZE(image));
      png_ok = png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr) != 0;
    }
  }
  png_image_free(&image);
  // libpng rejected it (not merely skipped for size): then so must we.
  const bool png_tried = !chunks_fit || !begun || within_budget;
  if (ours_ok && !png_ok && png_tried)
    fuzz::finding("our decoder accepted a PNG that libpng rejects: " + std::string(image.message));
  if (!ours_ok || !png_ok) return 0;
  if (ours.height != image.height || ours.width != image.width)
    fuzz::finding("our decoder and libpng disagree on the dimensions");
  const bool comparable = (original_format & (PNG_FORMAT_FLAG_ALPHA | PNG_FORMAT_FLAG_LINEAR |
                                              PNG_FORMAT_FLAG_COLORMAP)) == 0 &&
                          (channels == 3 || (original_format & PNG_FORMAT_FLAG_COLOR) == 0);
  if (!comparable) return 0;
  if (pixels.size() != ours.pixels.size()) fuzz::finding("pixel buffers differ in size");
  const int64_t p =
      fuzz::first_planar_mismatch(ours.pixels, pixels, ours.height * ours.width, channels);
  if (p >= 0) fuzz::finding("our decoder and libpng disagree on pixel " + std::to_string(p));
#else
  (void)data;
  (void)size;
  (void)ed::have_stb;
  (void)fuzz::finding;
#endif
  return 0;
}
