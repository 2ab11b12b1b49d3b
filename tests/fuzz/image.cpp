// Image decoding of the image-folder data set (data/image_folder.cpp calls decode_image with the
// file's path as the source). Byte 0 picks the decoder (Auto = libjpeg-turbo for JPEG, stb
// otherwise; forced stb; forced libjpeg-turbo) and the channel count; the rest is the file.
#include "fuzz_common.h"

#include <echelon/data/image_codec.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  namespace ed = echelon::data;
  if (size < 1) return 0;
  const ed::ImageDecoder decoders[] = {ed::ImageDecoder::Auto, ed::ImageDecoder::Stb,
                                       ed::ImageDecoder::TurboJpeg};
  const ed::ImageDecoder decoder = decoders[(data[0] & 0x7f) % 3];
  const int channels = data[0] & 0x80 ? 1 : 3;
  const std::vector<uint8_t> bytes(data + 1, data + size);
  const std::string source = "fuzz/image.bin";
  fuzz::expect_parse_or_error(source, [&] {
    const ed::Image image = ed::decode_image(bytes, source, channels, decoder);
    if (image.channels != channels || image.height < 1 || image.width < 1 ||
        static_cast<int64_t>(image.pixels.size()) != image.numel())
      fuzz::finding("decoded image is inconsistent");
  });
  return 0;
}
