// Image decoding of the image-folder data set (data/image_folder.cpp calls decode_image with the
// file's path as the source). Byte 0 picks the entry point and the channel count (bit 7: 1
// channel, else 3); (byte 0 & 0x7f) % 6 is
//   0 decode_image, Auto (libjpeg-turbo for JPEG, stb otherwise)   1 forced stb
//   2 forced libjpeg-turbo
//   3..5 decode_image_scaled (JPEG: DCT-domain downscaling) for a smallest output of 1, 16, 64
//        pixels a side
// The rest is the file.
#include "fuzz_common.h"

#include <echelon/data/image_codec.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
  if (size < 1) return 0;
  const ed::ImageDecoder decoders[] = {ed::ImageDecoder::Auto, ed::ImageDecoder::Stb,
                                       ed::ImageDecoder::TurboJpeg};
  const int mode = (data[0] & 0x7f) % 6;
  const int channels = data[0] & 0x80 ? 1 : 3;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  const std::string source = "fuzz/image.bin";
  fuzz::expect_parse_or_error(source, [&] {
    ed::Image image;
    if (mode < 3) {
      image = ed::decode_image(bytes, source, channels, decoders[mode]);
    } else {
      const int64_t min_side = mode == 3 ? 1 : mode == 4 ? 16 : 64;
      image = ed::decode_image_scaled(bytes, source, channels, min_side, min_side);
    }
    if (image.channels != channels || image.height < 1 || image.width < 1 ||
        static_cast<int64_t>(image.pixels.size()) != image.numel())
      fuzz::finding("decoded image is inconsistent");
    fuzz::branch_on_pixels(image.pixels);
  });
  return 0;
}
