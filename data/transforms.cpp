#include <echelon/data/transforms.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <echelon/base/error.h>
#include <echelon/data/random_keys.h>

namespace echelon::data {

namespace {

constexpr int64_t kMaxCropPadding = 1024;

// A padding written as plain decimal digits ("4"; not "+4", "4.0", " 4" or "0x4").
int64_t parse_padding(std::string_view digits, const std::string& spec, std::string_view token) {
  const bool plain =
      !digits.empty() && digits.size() <= 4 &&
      std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  int64_t value = 0;
  for (const char c : plain ? digits : std::string_view{}) value = value * 10 + (c - '0');
  ECH_CHECK(plain && value >= 1 && value <= kMaxCropPadding, "augmentation '", spec, "': '", token,
            "' needs a padding of 1..", kMaxCropPadding, " pixels, e.g. crop:4");
  return value;
}

// One output sample of a 1-D resample: input samples [first, first + weights.size()) and their
// weights (summing to 1).
struct Taps {
  int64_t first = 0;
  std::vector<float> weights;
};

// PIL's scheme: output sample i is centred at (i + 0.5) * in / out in input coordinates; a
// triangle of radius max(1, in / out) input samples weighs the inputs around it.
std::vector<Taps> triangle_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double radius = std::max(scale, 1.0);
  std::vector<Taps> taps(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(center - radius)));
    const int64_t hi = std::min<int64_t>(in, static_cast<int64_t>(std::ceil(center + radius)));
    std::vector<double> weights;
    double total = 0;
    for (int64_t x = lo; x < hi; ++x) {
      const double w =
          std::max(0.0, 1.0 - std::abs((static_cast<double>(x) + 0.5 - center) / radius));
      weights.push_back(w);
      total += w;
    }
    taps[i].first = lo;
    for (const double w : weights) taps[i].weights.push_back(static_cast<float>(w / total));
  }
  return taps;
}

}  // namespace

Image resize_shorter_side(const Image& image, int64_t size) {
  const int64_t h = image.height, w = image.width, c = image.channels;
  ECH_CHECK(size >= 1 && h >= 1 && w >= 1 && static_cast<int64_t>(image.pixels.size()) == h * w * c,
            "resize: cannot bring a ", h, "x", w, "x", c, " image to a shorter side of ", size);
  const int64_t out_h = h <= w ? size : size * h / w;
  const int64_t out_w = h <= w ? size * w / h : size;
  if (out_h == h && out_w == w) return image;
  const std::vector<Taps> across = triangle_taps(w, out_w), down = triangle_taps(h, out_h);
  Image out{out_h, out_w, c, std::vector<uint8_t>(static_cast<size_t>(out_h * out_w * c))};
  std::vector<float> rows(static_cast<size_t>(h * out_w));  // one channel resized across: (H, W')
  for (int64_t ch = 0; ch < c; ++ch) {
    const uint8_t* plane = image.pixels.data() + ch * h * w;  // (H, W)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < out_w; ++x) {
        const Taps& t = across[x];
        float sum = 0;
        for (size_t k = 0; k < t.weights.size(); ++k)
          sum += t.weights[k] * plane[y * w + t.first + static_cast<int64_t>(k)];
        rows[y * out_w + x] = sum;
      }
    uint8_t* dst = out.pixels.data() + ch * out_h * out_w;  // (H', W')
    for (int64_t y = 0; y < out_h; ++y) {
      const Taps& t = down[y];
      for (int64_t x = 0; x < out_w; ++x) {
        float sum = 0;
        for (size_t k = 0; k < t.weights.size(); ++k)
          sum += t.weights[k] * rows[(t.first + static_cast<int64_t>(k)) * out_w + x];
        dst[y * out_w + x] = static_cast<uint8_t>(std::clamp(std::lround(sum), 0L, 255L));
      }
    }
  }
  return out;
}

AugmentRecipe parse_augment_spec(const std::string& spec) {
  AugmentRecipe recipe;
  if (spec == "none") return recipe;
  ECH_CHECK(!spec.empty(), "augmentation '': empty (expected none, or a comma list of crop:P and ",
            "flip)");
  bool crop_seen = false, flip_seen = false;
  std::string_view rest = spec;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view token = rest.substr(0, comma);
    ECH_CHECK(!token.empty(), "augmentation '", spec, "': empty entry");
    ECH_CHECK(token != "none", "augmentation '", spec, "': 'none' cannot be combined with others");
    if (token == "flip") {
      ECH_CHECK(!flip_seen, "augmentation '", spec, "': 'flip' appears twice");
      flip_seen = recipe.horizontal_flip = true;
    } else if (token.substr(0, 4) == "crop") {
      ECH_CHECK(!crop_seen, "augmentation '", spec, "': '", token, "' is a second crop");
      ECH_CHECK(token.size() > 4 && token[4] == ':', "augmentation '", spec, "': '", token,
                "' needs a padding, e.g. crop:4");
      recipe.crop_padding = parse_padding(token.substr(5), spec, token);
      crop_seen = true;
    } else {
      ECH_FAIL("augmentation '", spec, "': unknown word '", token,
               "' (expected none, or a comma list of crop:P and flip)");
    }
    if (comma == std::string_view::npos) return recipe;
    rest = rest.substr(comma + 1);
  }
}

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

namespace {

// The crop_to x crop_to square of `image` at a random place (its own Philox draw, so the
// padding-crop and flip draws of runs without it stay as they were) or in the centre.
Image crop_square(const Image& image, const AugmentOptions& options, const AugmentKey& key) {
  const int64_t size = options.crop_to, h = image.height, w = image.width, c = image.channels;
  ECH_CHECK(h >= size && w >= size, "augment: a ", h, "x", w, " image is smaller than the ", size,
            "x", size, " crop");
  int64_t top = (h - size) / 2, left = (w - size) / 2;
  if (options.random_crop) {
    const Philox4 words =
        data_draw(key.seed, key.epoch, DrawPurpose::Crop, key.index, key.echo_copy);
    top = static_cast<int64_t>(words.x[0] % static_cast<uint32_t>(h - size + 1));
    left = static_cast<int64_t>(words.x[1] % static_cast<uint32_t>(w - size + 1));
  }
  Image out{size, size, c, std::vector<uint8_t>(static_cast<size_t>(size * size * c))};
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t y = 0; y < size; ++y) {
      const uint8_t* src = image.pixels.data() + (ch * h + top + y) * w + left;
      std::copy(src, src + size, out.pixels.data() + (ch * size + y) * size);
    }
  return out;
}

}  // namespace

Image augment_image(const Image& input, const AugmentOptions& options, const AugmentKey& key) {
  ECH_CHECK(options.crop_padding >= 0, "augment: crop_padding ", options.crop_padding, " < 0");
  ECH_CHECK(static_cast<int64_t>(input.pixels.size()) == input.numel(), "augment: image ",
            input.height, "x", input.width, "x", input.channels, " has ", input.pixels.size(),
            " bytes");
  const Image cropped = options.crop_to > 0 ? crop_square(input, options, key) : Image{};
  const Image& image = options.crop_to > 0 ? cropped : input;
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

ChannelNormalise normalise_channel(const AugmentOptions& options, int64_t channels, int64_t ch) {
  auto channel_value = [&](const std::vector<float>& values, float fallback, const char* what) {
    if (values.empty()) return fallback;
    ECH_CHECK(values.size() == 1 || static_cast<int64_t>(values.size()) == channels,
              "normalize: ", what, " has ", values.size(), " values for an image with ", channels,
              " channels");
    return values.size() == 1 ? values[0] : values[ch];
  };
  const float mean = channel_value(options.mean, 0.0f, "mean");
  const float std = channel_value(options.std, 1.0f, "std");
  ECH_CHECK(std > 0, "normalize: std of channel ", ch, " is ", std, " (must be > 0)");
  return {1.0f / (255.0f * std), -mean / std};
}

NormaliseCoefficients normalise_coefficients(const AugmentOptions& options, int64_t channels) {
  NormaliseCoefficients coeffs;
  for (int64_t ch = 0; ch < channels; ++ch) {
    const ChannelNormalise channel = normalise_channel(options, channels, ch);
    coeffs.scale.push_back(channel.scale);
    coeffs.shift.push_back(channel.shift);
  }
  return coeffs;
}

void to_float(const Image& image, const AugmentOptions& options, float* out) {
  to_float(image.pixels.data(), image.channels, image.height * image.width, options, out);
}

void to_float(const uint8_t* pixels, int64_t channels, int64_t plane, const AugmentOptions& options,
              float* out) {
  for (int64_t ch = 0; ch < channels; ++ch) {
    const ChannelNormalise channel = normalise_channel(options, channels, ch);
    to_float_plane(pixels + ch * plane, plane, channel, out + ch * plane);
  }
}

namespace {

void to_float_plane_portable(const uint8_t* src, int64_t n, ChannelNormalise channel, float* dst) {
  for (int64_t p = 0; p < n; ++p)
    dst[p] = static_cast<float>(src[p]) * channel.scale + channel.shift;
}

#if defined(__x86_64__)
// 16 pixels per step (the portable loop's SSE2 does 4). A multiply then an add, each rounded, as
// the portable loop (the build has -ffp-contract=off: no FMA), so the floats are the same bits.
__attribute__((target("avx512f"))) void to_float_plane_avx512(const uint8_t* src, int64_t n,
                                                              ChannelNormalise channel,
                                                              float* dst) {
  const __m512 scale = _mm512_set1_ps(channel.scale);
  const __m512 shift = _mm512_set1_ps(channel.shift);
  int64_t p = 0;
  for (; p + 16 <= n; p += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + p));
    // The maskz forms (all lanes): GCC 12's plain ones read an "undefined" vector it warns about.
    const __m512 x = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_maskz_cvtepu8_epi32(0xFFFF, bytes));
    _mm512_storeu_ps(dst + p, _mm512_add_ps(_mm512_mul_ps(x, scale), shift));
  }
  to_float_plane_portable(src + p, n - p, channel, dst + p);
}
#endif

}  // namespace

void to_float_plane(const uint8_t* src, int64_t n, ChannelNormalise channel, float* dst) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) {
    to_float_plane_avx512(src, n, channel, dst);
    return;
  }
#endif
  to_float_plane_portable(src, n, channel, dst);
}

}  // namespace echelon::data
