#include <echelon/data/transforms.h>

#include <echelon/base/error.h>
#include <echelon/data/random_keys.h>

namespace echelon::data {

AugmentDraw draw_augment(const AugmentOptions& options, const AugmentKey& key) {
  const Philox4 words =
      data_draw(key.seed, key.epoch, DrawPurpose::Augment, key.index, key.echo_copy);
  AugmentDraw draw;
  const auto positions = static_cast<uint32_t>(2 * options.crop_padding + 1);
  if (options.crop_padding > 0) {
    draw.dy = words.x[0] % positions;
    draw.dx = words.x[1] % positions;
  } else {
    draw.dy = draw.dx = 0;
  }
  draw.flip = options.horizontal_flip && (words.x[2] & 1u);
  return draw;
}

Image augment_image(const Image& image, const AugmentOptions& options, const AugmentKey& key) {
  ECH_CHECK(options.crop_padding >= 0, "augment: crop_padding ", options.crop_padding, " < 0");
  ECH_CHECK(static_cast<int64_t>(image.pixels.size()) == image.numel(), "augment: image ",
            image.height, "x", image.width, "x", image.channels, " has ", image.pixels.size(),
            " bytes");
  const AugmentDraw draw = draw_augment(options, key);
  if (options.crop_padding == 0 && !draw.flip) return image;
  const int64_t h = image.height, w = image.width, c = image.channels, pad = options.crop_padding;
  Image out{h, w, c, std::vector<uint8_t>(image.pixels.size(), 0)};
  for (int64_t ch = 0; ch < c; ++ch) {
    const uint8_t* src = image.pixels.data() + ch * h * w;  // (H, W) plane
    uint8_t* dst = out.pixels.data() + ch * h * w;
    for (int64_t y = 0; y < h; ++y) {
      const int64_t src_y = y + draw.dy - pad;  // row in the unpadded source
      if (src_y < 0 || src_y >= h) continue;    // padding rows stay zero
      for (int64_t x = 0; x < w; ++x) {
        const int64_t crop_x = draw.flip ? w - 1 - x : x;
        const int64_t src_x = crop_x + draw.dx - pad;
        if (src_x >= 0 && src_x < w) dst[y * w + x] = src[src_y * w + src_x];
      }
    }
  }
  return out;
}

NormaliseCoefficients normalise_coefficients(const AugmentOptions& options, int64_t channels) {
  auto channel_value = [&](const std::vector<float>& values, int64_t ch, float fallback,
                           const char* what) {
    if (values.empty()) return fallback;
    ECH_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == channels,
              "normalize: ", what, " has ", values.size(), " values for an image with ", channels,
              " channels");
    return values.size() == 1 ? values[0] : values[ch];
  };
  NormaliseCoefficients coeffs;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const float mean = channel_value(options.mean, ch, 0.0f, "mean");
    const float std = channel_value(options.std, ch, 1.0f, "std");
    ECH_CHECK(std > 0, "normalize: std of channel ", ch, " is ", std, " (must be > 0)");
    coeffs.scale.push_back(1.0f / (255.0f * std));
    coeffs.shift.push_back(-mean / std);
  }
  return coeffs;
}

void to_float(const Image& image, const AugmentOptions& options, float* out) {
  const int64_t h = image.height, w = image.width, c = image.channels;
  const NormaliseCoefficients coeffs = normalise_coefficients(options, c);
  for (int64_t ch = 0; ch < c; ++ch) {
    const float scale = coeffs.scale[ch], shift = coeffs.shift[ch];
    for (int64_t p = ch * h * w; p < (ch + 1) * h * w; ++p)
      out[p] = static_cast<float>(image.pixels[p]) * scale + shift;
  }
}

}  // namespace echelon::data
