// PNG through decode_image for every layout the format has: bit depths 1/2/4/8/16, gray, RGB,
// palette, gray+alpha, RGBA, plain and Adam7-interlaced, odd sizes (passes left empty), rows under
// each of the five filter types. The files are written here by a small encoder (stb_image_write
// writes only 8-bit, non-interlaced files), so the expected pixels are known. Each file's image
// data inflates to exactly the bytes its header needs, the boundary of the size check decode_image
// does before stb allocates; one scanline byte fewer must be refused, naming the file.
#include <doctest/doctest.h>

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <echelon/base/error.h>
#include <echelon/data/image_codec.h>

using echelon::data::decode_image;
using echelon::data::Image;

namespace {

using Bytes = std::vector<uint8_t>;

void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(Bytes& png, const char* type, const Bytes& body) {
  put_be32(png, static_cast<uint32_t>(body.size()));
  const size_t start = png.size();
  png.insert(png.end(), type, type + 4);
  png.insert(png.end(), body.begin(), body.end());
  put_be32(png, static_cast<uint32_t>(crc32(0, png.data() + start, 4 + body.size())));
}

struct Layout {
  int depth, color_type;  // PNG's IHDR fields
  bool interlaced;
  int bad_x = -1, bad_y = -1;  // a palette image's pixel given index 5, past the 5 colours
};

int samples_per_pixel(int color_type) {
  return color_type == 2 ? 3 : color_type == 4 ? 2 : color_type == 6 ? 4 : 1;
}

// The stored sample (channel s of pixel (y, x)) the test image holds: varied, within the depth.
uint32_t sample(const Layout& l, int y, int x, int s) {
  if (x == l.bad_x && y == l.bad_y) return 5;
  const uint32_t max = l.depth == 16 ? 65535u : (1u << l.depth) - 1;
  const uint32_t v = static_cast<uint32_t>(y * 7919 + x * 104729 + s * 31337) * 2654435761u;
  return (v >> 8) % (l.color_type == 3 && max > 4 ? 5 : max + 1);  // a palette of 5 entries
}

// The predictor of PNG filter `type` from the bytes left (a), above (b) and above-left (c).
int predictor(int type, int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  const int paeth = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
  const int by_type[5] = {0, a, b, (a + b) / 2, paeth};
  return by_type[type];
}

// The scanlines of the pixels in one pass (every pixel when not interlaced), row r of the pass
// with filter type r % 5, so each of the five filters is undone by the decoders.
void append_pass(Bytes& raw, const Layout& l, int width, int height, int x0, int y0, int dx,
                 int dy) {
  const int spp = samples_per_pixel(l.color_type);
  const size_t left = static_cast<size_t>(std::max(1, spp * l.depth / 8));  // bytes per pixel
  Bytes row, above;
  for (int y = y0, r = 0; y < height; y += dy, ++r) {
    if (x0 >= width) return;
    row.clear();
    uint32_t acc = 0;
    int bits = 0;
    for (int x = x0; x < width; x += dx)
      for (int s = 0; s < spp; ++s) {
        acc = acc << l.depth | sample(l, y, x, s);
        bits += l.depth;
        while (bits >= 8) {
          bits -= 8;
          row.push_back(static_cast<uint8_t>(acc >> bits));
        }
      }
    if (bits > 0) row.push_back(static_cast<uint8_t>(acc << (8 - bits)));
    above.resize(row.size(), 0);
    const int type = r % 5;
    raw.push_back(static_cast<uint8_t>(type));
    for (size_t i = 0; i < row.size(); ++i) {
      const int a = i >= left ? row[i - left] : 0, c = i >= left ? above[i - left] : 0;
      raw.push_back(static_cast<uint8_t>(row[i] - predictor(type, a, above[i], c)));
    }
    above = row;
  }
}

// Five RGB entries.
const uint8_t kPalette[15] = {10, 20, 30, 200, 0, 50, 0, 255, 0, 90, 90, 90, 1, 2, 3};

// `drop` removes bytes from the end of the scanlines before compressing (a short file).
Bytes encode(const Layout& l, int width, int height, size_t drop = 0) {
  Bytes raw;
  if (!l.interlaced) {
    append_pass(raw, l, width, height, 0, 0, 1, 1);
  } else {
    static const int kPass[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                    {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    for (const auto& p : kPass) append_pass(raw, l, width, height, p[0], p[1], p[2], p[3]);
  }
  raw.resize(raw.size() - drop);
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  Bytes packed(packed_size);
  REQUIRE(compress(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size())) ==
          Z_OK);
  packed.resize(packed_size);

  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes header;
  put_be32(header, static_cast<uint32_t>(width));
  put_be32(header, static_cast<uint32_t>(height));
  header.insert(header.end(), {static_cast<uint8_t>(l.depth), static_cast<uint8_t>(l.color_type), 0,
                               0, static_cast<uint8_t>(l.interlaced)});
  put_chunk(png, "IHDR", header);
  if (l.color_type == 3) put_chunk(png, "PLTE", Bytes(kPalette, kPalette + 15));
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", {});
  return png;
}

// What decode_image returns for channel c (0 = gray or red) of pixel (y, x), as stb converts:
// low depths scaled to 0..255, 16-bit samples keep their high byte, alpha dropped, colour to
// gray by stb's (77 r + 150 g + 29 b) >> 8 (at 16 bits for 16-bit files).
uint8_t expected(const Layout& l, int y, int x, int channels, int c) {
  auto to8 = [&](uint32_t v) {
    return static_cast<uint8_t>(l.depth == 16 ? v >> 8 : v * (255u / ((1u << l.depth) - 1)));
  };
  uint8_t rgb[3];
  if (l.color_type == 3) {
    for (int s = 0; s < 3; ++s) rgb[s] = kPalette[sample(l, y, x, 0) * 3 + s];
  } else if (l.color_type == 0 || l.color_type == 4) {
    rgb[0] = rgb[1] = rgb[2] = to8(sample(l, y, x, 0));
  } else {
    for (int s = 0; s < 3; ++s) rgb[s] = to8(sample(l, y, x, s));
  }
  if (channels == 3) return rgb[c];
  if (l.color_type == 0 || l.color_type == 4) return rgb[0];
  if (l.depth == 16) {  // stb converts to gray before it drops the low bytes
    const uint32_t r = sample(l, y, x, 0), g = sample(l, y, x, 1), b = sample(l, y, x, 2);
    return static_cast<uint8_t>(((r * 77 + g * 150 + b * 29) >> 8) >> 8);
  }
  return static_cast<uint8_t>((rgb[0] * 77 + rgb[1] * 150 + rgb[2] * 29) >> 8);
}

std::string describe(const Layout& l, int width, int height, int channels) {
  return std::to_string(width) + "x" + std::to_string(height) + " depth " +
         std::to_string(l.depth) + " type " + std::to_string(l.color_type) +
         (l.interlaced ? " interlaced" : "") + " -> " + std::to_string(channels) + " channels";
}

const Layout kLayouts[] = {{1, 0, false},  {2, 0, true},  {4, 0, false}, {8, 0, true},
                           {16, 0, false}, {8, 2, false}, {8, 2, true},  {16, 2, true},
                           {1, 3, true},   {4, 3, false}, {8, 3, true},  {8, 4, false},
                           {16, 4, true},  {8, 6, true},  {16, 6, false}};
const int kSizes[][2] = {{1, 1}, {3, 5}, {9, 7}, {13, 1}, {1, 17}, {16, 16}};

}  // namespace

TEST_CASE("decode_image reads every PNG layout, plain and interlaced, at odd sizes") {
  if (!echelon::data::have_stb()) return;
  int compared = 0;
  for (const Layout& l : kLayouts)
    for (const auto& size : kSizes)
      for (int channels : {1, 3}) {
        const int width = size[0], height = size[1];
        CAPTURE(describe(l, width, height, channels));
        const Image image = decode_image(encode(l, width, height), "t.png", channels);
        REQUIRE(image.height == height);
        REQUIRE(image.width == width);
        REQUIRE(image.channels == channels);
        int mismatches = 0;
        for (int c = 0; c < channels; ++c)
          for (int y = 0; y < height; ++y)
            for (int x = 0; x < width; ++x)
              mismatches += image.pixels[(static_cast<size_t>(c) * height + y) * width + x] !=
                            expected(l, y, x, channels, c);
        CHECK(mismatches == 0);
        ++compared;
      }
  CHECK(compared == 15 * 6 * 2);
}

TEST_CASE("a PNG whose image data is one byte short of its header is refused before stb") {
  if (!echelon::data::have_stb()) return;
  for (const Layout& l : kLayouts) {
    CAPTURE(describe(l, 9, 7, 3));
    const Bytes short_png = encode(l, 9, 7, 1);
    try {
      decode_image(short_png, "short.png", 3);
      FAIL("accepted");
    } catch (const echelon::Error& e) {
      const std::string message = e.what();
      CHECK(message.find("short.png") != std::string::npos);
      CHECK(message.find("PNG image data inflates to") != std::string::npos);
      CHECK(message.find("9x7 header") != std::string::npos);
    }
  }
}

TEST_CASE("a PNG pixel whose palette index is past the PLTE chunk is refused, naming the pixel") {
  // stb_image would decode it from its uninitialised stack: different pixels on every run.
  if (!echelon::data::have_stb()) return;
  for (const Layout& palette : {Layout{4, 3, false}, Layout{8, 3, true}, Layout{4, 3, true}}) {
    for (const auto& at : {std::pair{6, 4}, std::pair{0, 0}, std::pair{8, 6}}) {
      Layout bad = palette;
      bad.bad_x = at.first;
      bad.bad_y = at.second;
      CAPTURE(describe(bad, 9, 7, 3));
      const std::string message = "bad.png: PNG pixel (x " + std::to_string(at.first) + ", y " +
                                  std::to_string(at.second) +
                                  ") uses palette index 5, but the PLTE chunk holds 5 colours "
                                  "(damaged file)";
      CHECK_THROWS_WITH_AS(decode_image(encode(bad, 9, 7), "bad.png", 3),
                           doctest::Contains(message.c_str()), echelon::Error);
    }
  }
}

TEST_CASE("a PNG with a second PLTE chunk before its image data is refused, naming the offset") {
  // The PNG spec allows one PLTE chunk; libpng refuses a second ("PLTE: duplicate"), in a gray
  // file too, where it ignores the first; stb_image decoded with either (diff_png, session 40).
  if (!echelon::data::have_stb()) return;
  for (const Layout& l : {Layout{8, 3, false}, Layout{4, 3, true}, Layout{8, 0, false}}) {
    CAPTURE(describe(l, 9, 7, 3));
    Bytes png = encode(l, 9, 7);
    const char* kIdat = "IDAT";
    const auto idat = std::search(png.begin(), png.end(), kIdat, kIdat + 4);
    REQUIRE(idat != png.end());
    const size_t at = static_cast<size_t>(idat - png.begin()) - 4;  // the IDAT chunk's length
    Bytes palette;
    put_chunk(palette, "PLTE", Bytes(kPalette, kPalette + 15));
    if (l.color_type != 3) {  // a gray file's first PLTE, ignored by every decoder
      png.insert(png.begin() + static_cast<std::ptrdiff_t>(at), palette.begin(), palette.end());
      CHECK(decode_image(png, "gray.png", 3).width == 9);
    }
    const size_t second = at + (l.color_type != 3 ? palette.size() : 0);
    png.insert(png.begin() + static_cast<std::ptrdiff_t>(second), palette.begin(), palette.end());
    const std::string message =
        "two.png: PNG has a second PLTE chunk at offset " + std::to_string(second);
    CHECK_THROWS_WITH_AS(decode_image(png, "two.png", 3), doctest::Contains(message.c_str()),
                         echelon::Error);
  }
}

TEST_CASE("a PNG's image data split into IDAT runs with another chunk between them is refused") {
  // libpng reads only the first run ("Not enough image data"); stb_image would join them.
  if (!echelon::data::have_stb()) return;
  const Layout l{8, 2, false};
  const Bytes png = encode(l, 9, 7);
  const char* kIdat = "IDAT";
  const size_t at =
      static_cast<size_t>(std::search(png.begin(), png.end(), kIdat, kIdat + 4) - png.begin()) - 4;
  const size_t length = (size_t{png[at]} << 24) | (size_t{png[at + 1]} << 16) |
                        (size_t{png[at + 2]} << 8) | png[at + 3];
  const Bytes data(png.begin() + static_cast<std::ptrdiff_t>(at + 8),
                   png.begin() + static_cast<std::ptrdiff_t>(at + 8 + length));
  const Bytes front(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(length / 2));
  const Bytes back(data.begin() + static_cast<std::ptrdiff_t>(length / 2), data.end());
  const auto split = [&](bool text_between) {
    Bytes out(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(at));
    put_chunk(out, "IDAT", front);
    if (text_between) put_chunk(out, "tEXt", {'k', 0, 'v'});
    put_chunk(out, "IDAT", back);
    out.insert(out.end(), png.begin() + static_cast<std::ptrdiff_t>(at + 12 + length), png.end());
    return out;
  };
  CHECK(decode_image(split(false), "runs.png", 3).width == 9);  // consecutive: one run
  const Bytes broken = split(true);
  const std::string message = "runs.png: PNG has an IDAT chunk at offset " +
                              std::to_string(at + 12 + front.size() + 15) +
                              " after other chunks followed the image data";
  CHECK_THROWS_WITH_AS(decode_image(broken, "runs.png", 3), doctest::Contains(message.c_str()),
                       echelon::Error);
}
