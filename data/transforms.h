// Per-example transforms on (C, H, W) images: random crop with zero padding, horizontal flip,
// uint8 -> float, normalise per channel. Every random choice is a pure function of (seed, epoch,
// sample index, echo copy) through Philox, so a run is reproducible no matter which worker thread
// ran it, and the echo copies of one example before augmentation get different augmentations.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/data/dataset.h>

namespace echelon::data {

struct AugmentOptions {
  // > 0: first cut a crop_to x crop_to square out of the image, which may have any size >= it
  // (images resized by `--resize`): at a random place when random_crop (training), centred
  // otherwise (evaluation), as torchvision's RandomCrop / CenterCrop.
  int64_t crop_to = 0;
  bool random_crop = false;
  int64_t crop_padding = 0;  // pad each side by this many zero pixels, then crop back: 0 = off
  bool horizontal_flip = false;
  // Per-channel mean/std in [0, 1] pixel units; empty = no normalisation (pixels / 255 only).
  // One value applies to every channel.
  std::vector<float> mean, std;
};

// The identity of one augmentation draw.
struct AugmentKey {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t index = 0;      // dataset index
  int64_t echo_copy = 0;  // 0 for the fresh copy, 1.. for echoes made before augmentation
};

// `--augment`: "none", or a comma list of "crop:P" (pad P pixels each side, 1 <= P <= 1024, then
// crop back at a random place) and "flip" (horizontal, probability 1/2). Strict: an empty entry,
// an unknown word, a bad number or a word given twice throws naming the token.
struct AugmentRecipe {
  int64_t crop_padding = 0;
  bool horizontal_flip = false;
};
AugmentRecipe parse_augment_spec(const std::string& spec);

// The image scaled so that its shorter side is `size` and the longer one in proportion (rounded
// down, as torchvision's Resize(int)), by separable triangle-filter (bilinear) resampling whose
// support widens with the scale factor when shrinking: antialiased like PIL's BILINEAR, so a
// 4000-pixel photo brought to 64 does not alias. Same size: returned as is.
Image resize_shorter_side(const Image& image, int64_t size);

// The crop offset and flip chosen for `key` (exposed for tests).
struct AugmentDraw {
  int64_t dy = 0, dx = 0;  // top-left corner of the crop in the padded image, in [0, 2*pad]
  bool flip = false;
};
AugmentDraw draw_augment(const AugmentOptions& options, const AugmentKey& key);

// Square crop (crop_to), then random crop with padding and flip of a (C, H, W) image; the output
// has the input's size, or crop_to x crop_to.
Image augment_image(const Image& image, const AugmentOptions& options, const AugmentKey& key);

// Per-channel out = pixel * scale + shift, from mean/std (one value or one per channel); throws
// naming the option when the counts do not match `channels` or a std is not > 0.
struct NormaliseCoefficients {
  std::vector<float> scale, shift;
};
NormaliseCoefficients normalise_coefficients(const AugmentOptions& options, int64_t channels);
// Channel `ch`'s entry of normalise_coefficients (same checks), without allocating: the loader
// asks once per example.
struct ChannelNormalise {
  float scale = 1, shift = 0;
};
ChannelNormalise normalise_channel(const AugmentOptions& options, int64_t channels, int64_t ch);

// uint8 -> float in [0, 1], then (x - mean[c]) / std[c]. Writes C*H*W floats to `out`.
void to_float(const Image& image, const AugmentOptions& options, float* out);  // (C, H, W)
// The same on raw pixels: `channels` planes of `plane` bytes each.
void to_float(const uint8_t* pixels, int64_t channels, int64_t plane, const AugmentOptions& options,
              float* out);  // pixels, out: (C, H, W)
// One plane: dst[p] = float(src[p]) * scale + shift for p < n (AVX-512 where the CPU has it; the
// same bits as the scalar expression).
void to_float_plane(const uint8_t* src, int64_t n, ChannelNormalise channel, float* dst);

}  // namespace echelon::data
