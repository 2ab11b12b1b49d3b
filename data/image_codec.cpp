#include <echelon/data/image_codec.h>

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <echelon/base/error.h>
#include <echelon/data/io.h>

#include <echelon/data/jpeg_decode.h>
#include <echelon/data/pixel_layout.h>

#ifdef ECHELON_WITH_STB
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
#endif

namespace echelon::data {

bool have_stb() {
#ifdef ECHELON_WITH_STB
  return true;
#else
  return false;
#endif
}

bool have_turbojpeg() {
#ifdef ECHELON_WITH_TURBOJPEG
  return true;
#else
  return false;
#endif
}

bool is_jpeg(const std::vector<uint8_t>& bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

namespace detail {

// The largest image we decode: 2^25 pixels (e.g. 5792 x 5792), checked from the header before any
// allocation, so a header claiming 65500 x 65500 cannot make us allocate gigabytes. Far above
// what a CNN trains on; the decoders' own working memory stays within a few hundred MB.
constexpr int64_t kMaxPixels = int64_t{1} << 25;

void check_image_dimensions(int64_t width, int64_t height, const std::string& source,
                            const char* format) {
  ECH_CHECK(width >= 1 && height >= 1, source, ": ", format, " header has invalid dimensions ",
            width, "x", height);
  // Each side first: PNG sides are 32-bit, so the product of two unchecked sides overflows int64
  // (found by diff_png in CI, stop 32).
  ECH_CHECK(width <= kMaxPixels && height <= kMaxPixels && width * height <= kMaxPixels, source,
            ": ", format, " image of ", width, "x", height, " pixels exceeds the limit of ",
            kMaxPixels, " pixels");
}

}  // namespace detail

namespace {

// PNG chunk CRCs and the zlib checksum of the image data (stb_image checks neither): a damaged file
// must not be trained on. Walks the chunks from the signature to IEND; names the chunk and its
// offset. The image data (all IDAT chunks, one zlib stream) must inflate completely with a correct
// Adler-32: stb_image does not check it, so a damaged stream under a recomputed chunk CRC was
// decoded (found by the diff_png target against libpng). Returns the inflated size; appends the
// inflated bytes to `keep` when it is given.
[[maybe_unused]] uint64_t check_png_zlib(const std::vector<uint8_t>& idat,
                                         const std::string& source,
                                         std::vector<uint8_t>* keep = nullptr) {
  z_stream stream{};
  ECH_CHECK(inflateInit(&stream) == Z_OK, source, ": zlib: cannot start inflating");
  std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&stream, &inflateEnd);
  stream.next_in = const_cast<uint8_t*>(idat.data());
  stream.avail_in = static_cast<uInt>(idat.size());
  std::vector<uint8_t> sink(1 << 16);
  uint64_t inflated = 0;
  int status = Z_OK;
  while (status == Z_OK) {
    stream.next_out = sink.data();
    stream.avail_out = static_cast<uInt>(sink.size());
    status = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = sink.size() - stream.avail_out;
    if (keep != nullptr) keep->insert(keep->end(), sink.begin(), sink.begin() + produced);
    inflated += produced;
  }
  ECH_CHECK(status == Z_STREAM_END, source, ": PNG image data (IDAT) is ",
            status == Z_BUF_ERROR ? "truncated" : "corrupt",
            " (zlib: ", stream.msg ? stream.msg : zError(status), ")");
  return inflated;
}

// The IHDR fields that fix how many bytes the image data must inflate to.
struct PngHeader {
  uint32_t width = 0, height = 0;
  int depth = 0, color_type = 0, interlace = 0;
};

// One sub-image of a PNG: the whole image, or one of the seven Adam7 passes of an interlaced one.
// Pixel (column, row) of the pass is pixel (x0 + column * dx, y0 + row * dy) of the image.
struct PngPass {
  uint64_t x0 = 0, y0 = 0, dx = 1, dy = 1, columns = 0, rows = 0;
};

[[maybe_unused]] std::vector<PngPass> png_passes(const PngHeader& h) {
  if (h.interlace == 0) return {{0, 0, 1, 1, h.width, h.height}};
  static const int kStart[7][2] = {{0, 0}, {4, 0}, {0, 4}, {2, 0}, {0, 2}, {1, 0}, {0, 1}};
  static const int kStep[7][2] = {{8, 8}, {8, 8}, {4, 8}, {4, 4}, {2, 4}, {2, 2}, {1, 2}};
  auto count = [](uint64_t size, int start, int step) {
    return size > uint64_t(start) ? (size - start + step - 1) / step : 0;
  };
  std::vector<PngPass> passes;
  passes.reserve(7);
  for (int pass = 0; pass < 7; ++pass)
    passes.push_back({uint64_t(kStart[pass][0]), uint64_t(kStart[pass][1]),
                      uint64_t(kStep[pass][0]), uint64_t(kStep[pass][1]),
                      count(h.width, kStart[pass][0], kStep[pass][0]),
                      count(h.height, kStart[pass][1], kStep[pass][1])});
  return passes;
}

// Bytes of filtered scanlines (a filter byte per row) the header needs, summed over the seven
// Adam7 passes when interlaced; 0 for a colour type stb rejects anyway.
[[maybe_unused]] uint64_t png_scanline_bytes(const PngHeader& h) {
  static const int kSamples[7] = {1, 0, 3, 1, 2, 0, 4};  // per pixel, by colour type
  if (h.color_type < 0 || h.color_type > 6 || kSamples[h.color_type] == 0) return 0;
  const uint64_t bits_per_pixel = uint64_t(kSamples[h.color_type]) * uint64_t(h.depth);
  uint64_t total = 0;
  for (const PngPass& pass : png_passes(h))
    if (pass.columns != 0 && pass.rows != 0)
      total += pass.rows * ((pass.columns * bits_per_pixel + 7) / 8 + 1);
  return total;
}

// Pixel `column` of a row of `depth`-bit (1, 2, 4 or 8) values packed from the high bit down, as
// PNG and BMP store palette indices. Untraced in the fuzz build, as the pixel loops calling it.
[[maybe_unused]] ECHELON_NO_FUZZ_COVERAGE inline int packed_index(const uint8_t* row,
                                                                  uint64_t column, int depth) {
  const uint64_t bit = column * depth;
  return (row[bit / 8] >> (8 - depth - bit % 8)) & ((1 << depth) - 1);
}

// Unfilters one scanline of a palette image into `row` (`above`: the previous one of its pass, or
// zeros) and returns the first column whose index is `colours` or more, or -1. A palette pixel
// has at most 8 bits, so a filter's left neighbour is simply the previous byte. Untraced by the
// fuzz build: a 32 KB file can hold 2^25 pixels (a pixel loop, not parsing).
[[maybe_unused]] ECHELON_NO_FUZZ_COVERAGE int64_t unfilter_palette_row(
    const uint8_t* in, int filter, std::vector<uint8_t>& row, const std::vector<uint8_t>& above,
    uint64_t columns, int depth, uint64_t colours) {
  for (size_t i = 0; i < row.size(); ++i) {
    const int a = i > 0 ? row[i - 1] : 0, b = above[i], c = i > 0 ? above[i - 1] : 0;
    const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
    const int paeth = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
    const int predicted[5] = {0, a, b, (a + b) / 2, paeth};
    row[i] = static_cast<uint8_t>(in[i] + predicted[filter]);
  }
  for (uint64_t column = 0; column < columns; ++column)
    if (uint64_t(packed_index(row.data(), column, depth)) >= colours)
      return static_cast<int64_t>(column);
  return -1;
}

// stb_image expands a palette image through a 256-entry table on its stack that holds only the
// PLTE chunk's colours: a pixel whose index is past them decodes to whatever the stack held, which
// differs from run to run (found by fuzz_diff_jpeg in CI, stop 37; libpng reports such a file).
// So every index is read back from the inflated scanlines first, each row unfiltered.
[[maybe_unused]] void check_png_palette_indices(const std::vector<uint8_t>& scanlines,
                                                const PngHeader& h, uint64_t colours,
                                                const std::string& source) {
  const int depth = h.depth;
  // stb refuses other depths and a missing palette itself; a full palette holds every index.
  if (h.color_type != 3 || !(depth == 1 || depth == 2 || depth == 4 || depth == 8) ||
      colours == 0 || colours >= (uint64_t{1} << depth))
    return;
  std::vector<uint8_t> row, above;
  size_t at = 0;
  for (const PngPass& pass : png_passes(h)) {
    if (pass.columns == 0 || pass.rows == 0) continue;
    const size_t row_bytes = (pass.columns * depth + 7) / 8;
    above.assign(row_bytes, 0);
    row.resize(row_bytes);
    for (uint64_t r = 0; r < pass.rows; ++r, at += 1 + row_bytes) {
      const uint8_t filter = scanlines[at];
      ECH_CHECK(filter <= 4, source, ": PNG scanline at inflated offset ", at, " has filter type ",
                int{filter}, " (damaged file)");
      const int64_t column = unfilter_palette_row(scanlines.data() + at + 1, filter, row, above,
                                                  pass.columns, depth, colours);
      if (column >= 0)
        ECH_FAIL(source, ": PNG pixel (x ", pass.x0 + column * pass.dx, ", y ",
                 pass.y0 + r * pass.dy, ") uses palette index ",
                 packed_index(row.data(), uint64_t(column), depth), ", but the PLTE chunk holds ",
                 colours, " colours (damaged file)");
      std::swap(row, above);
    }
  }
}

[[maybe_unused]] void check_png_crcs(const std::vector<uint8_t>& bytes, const std::string& source) {
  std::vector<uint8_t> idat;
  PngHeader header;
  uint64_t palette_colours = 0;
  // A PLTE chunk before any IDAT; an IDAT; a chunk after the IDAT run.
  bool palette_before_data = false, seen_data = false, data_ended = false;
  size_t offset = 8;
  while (offset + 12 <= bytes.size()) {
    const uint32_t length = read_be32(bytes.data() + offset);
    const std::string type(reinterpret_cast<const char*>(bytes.data() + offset + 4), 4);
    ECH_CHECK(length <= bytes.size() - offset - 12, source, ": PNG chunk '", type, "' at offset ",
              offset, " claims ", length, " bytes, past the end of the file");
    const uint8_t* body = bytes.data() + offset + 8;
    const uint32_t stored = read_be32(body + length);
    const uint32_t computed = static_cast<uint32_t>(
        crc32(crc32(0, nullptr, 0), bytes.data() + offset + 4, static_cast<uInt>(length + 4)));
    ECH_CHECK(stored == computed, source, ": PNG chunk '", type, "' at offset ", offset,
              " has a bad CRC (damaged file)");
    // The size before stb reads it: stb refuses some large sizes itself, as "too large".
    if (type == "IHDR" && length >= 8)
      detail::check_image_dimensions(read_be32(body), read_be32(body + 4), source, "PNG");
    if (type == "IHDR" && length == 13)
      header = {read_be32(body), read_be32(body + 4), body[8], body[9], body[12]};
    // "There shall not be more than one PLTE chunk": libpng refuses a second one ("PLTE:
    // duplicate") when the first came before the image data, whatever the colour type; stb
    // decoded with either (found by diff_png in session 40's CI run).
    if (type == "PLTE") {
      ECH_CHECK(!palette_before_data, source, ": PNG has a second PLTE chunk at offset ", offset,
                " (damaged file)");
      palette_before_data = !seen_data;
      palette_colours = length / 3;
    }
    // IDAT chunks "shall appear consecutively": libpng reads the image data from the first run
    // only and fails with "Not enough image data" where stb would join the runs.
    if (type == "IDAT") {
      ECH_CHECK(!data_ended, source, ": PNG has an IDAT chunk at offset ", offset,
                " after other chunks followed the image data (IDAT chunks must be consecutive; "
                "damaged file)");
      seen_data = true;
      idat.insert(idat.end(), body, body + length);
    } else {
      data_ended = seen_data;
    }
    if (type == "IEND") {
      // stb sizes its buffers from the header before inflating: the 1 GB request diff_png found
      // (CI, stop 26) is 4x the scanline bytes of a 53214 x 601 16-bit RGBA header, from a file
      // of at most 64 KB. The data must hold the header's pixels first, which bounds what any
      // decoder allocates by what the file really holds (libpng also rejects short data).
      std::vector<uint8_t> scanlines;  // kept for a palette image only
      const uint64_t inflated =
          check_png_zlib(idat, source, header.color_type == 3 ? &scanlines : nullptr);
      const uint64_t needed = png_scanline_bytes(header);
      ECH_CHECK(inflated >= needed, source, ": PNG image data inflates to ", inflated,
                " bytes, but its ", header.width, "x", header.height, " header (", header.depth,
                "-bit, colour type ", header.color_type, header.interlace ? ", interlaced" : "",
                ") needs ", needed, " (truncated or corrupt file)");
      check_png_palette_indices(scanlines, header, palette_colours, source);
      return;
    }
    offset += 12 + size_t{length};
  }
  ECH_FAIL(source, ": PNG ends without an IEND chunk (truncated file)");
}

[[maybe_unused]] bool is_png(const std::vector<uint8_t>& bytes) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return bytes.size() >= 8 && std::equal(kSignature, kSignature + 8, bytes.begin());
}

// stb_image has no default Huffman tables and does not check the symbols of the tables a file
// defines: on a scan whose tables the file lacks (libjpeg-turbo then uses the standard tables, as
// for motion-JPEG) or a table with symbols the JPEG spec forbids, Debian's stb asserts (aborting
// the process) or reads out of bounds. Checked before stb sees a JPEG (stb takes any file that
// starts with SOI): the markers from SOI to the first scan must walk cleanly, the DHT segments be
// legal, and every scan use only tables defined before it (a progressive file may define tables
// between scans, so the walk skips each scan's entropy-coded data and goes on to the next marker).
// Found by fuzz_diff_jpeg (crash-stb-assert, crash-stb-missing-ac-table).
// The offset of the marker after the entropy-coded data starting at `at`: the first FF not
// followed by 00 (a stuffed FF), FF (fill) or a restart marker; b.size() if there is none.
[[maybe_unused]] size_t end_of_entropy_coded_data(const std::vector<uint8_t>& b, size_t at) {
  for (; at + 1 < b.size(); ++at) {
    const uint8_t next = b[at + 1];
    if (b[at] == 0xFF && next != 0x00 && next != 0xFF && !(next >= 0xD0 && next <= 0xD7)) return at;
  }
  return b.size();
}

// Also, every component of the frame must be decoded by some scan (a progressive one: by a DC scan,
// Ss = 0, Ah = 0): stb_image does not clear a component's buffers, so one that no scan reaches
// (a file cut after its first scan) decoded from uninitialised memory (valgrind, session 29).
[[maybe_unused]] void check_jpeg_for_stb(const std::vector<uint8_t>& b, const std::string& source) {
  bool defined[2][4] = {};
  bool progressive = false, scanned = false;
  int components = 0;  // of the frame (stb refuses more than 4)
  uint8_t component_ids[4] = {};
  bool decoded[4] = {};
  size_t i = 2;
  while (i + 4 <= b.size() && b[i] == 0xFF) {
    const uint8_t marker = b[i + 1];
    if (marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE) progressive = true;
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if ((marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {  // markers without a length
      i += 2;
      continue;
    }
    const size_t length = size_t{b[i + 2]} << 8 | b[i + 3];
    if (length < 2 || i + 2 + length > b.size() || marker == 0xD9) break;
    if (components == 0 && detail::is_sof(marker) && length >= 8) {
      components = static_cast<int>(std::min<size_t>({b[i + 9], 4, (length - 8) / 3}));
      for (int c = 0; c < components; ++c) component_ids[c] = b[i + 10 + 3 * size_t(c)];
    }
    if (marker == 0xDA) {
      ECH_CHECK(length >= 3, source, ": JPEG scan header at offset ", i,
                " is too short (damaged file)");
      const size_t count = b[i + 4];
      ECH_CHECK(length >= 6 + 2 * count, source, ": JPEG scan header at offset ", i,
                " is too short (damaged file)");
      // A progressive scan uses the DC tables (first coefficient only; a DC refinement scan,
      // Ah > 0, reads plain bits and no table) or the AC tables.
      const bool dc_scan = b[i + 5 + 2 * count] == 0, refinement = b[i + 7 + 2 * count] >> 4 != 0;
      const bool needs_dc = !progressive || (dc_scan && !refinement),
                 needs_ac = !progressive || !dc_scan;
      for (size_t k = 0; k < count; ++k) {
        for (int c = 0; c < components; ++c)
          decoded[c] |= component_ids[c] == b[i + 5 + 2 * k] && (!progressive || needs_dc);
        const int dc = b[i + 6 + 2 * k] >> 4, ac = b[i + 6 + 2 * k] & 15;
        ECH_CHECK((!needs_dc || (dc <= 3 && defined[0][dc])) &&
                      (!needs_ac || (ac <= 3 && defined[1][ac])),
                  source, ": JPEG scan at offset ", i,
                  " uses a Huffman table the file does not define",
                  " (stb_image cannot decode it; a build with libjpeg-turbo can)");
      }
      scanned = true;
      i = end_of_entropy_coded_data(b, i + 2 + length);
      continue;
    }
    if (marker == 0xC4) {
      for (size_t at = i + 4, end = i + 2 + length; at < end;) {
        ECH_CHECK(at + 17 <= end, source, ": JPEG Huffman table at offset ", i,
                  " is truncated (damaged file)");
        const int table_class = b[at] >> 4, id = b[at] & 15;
        size_t count = 0;
        for (int k = 1; k <= 16; ++k) count += b[at + k];
        ECH_CHECK(at + 17 + count <= end, source, ": JPEG Huffman table at offset ", i,
                  " is truncated (damaged file)");
        for (size_t k = 0; k < count; ++k) {
          const uint8_t symbol = b[at + 17 + k];
          const int bits = symbol & 15;
          ECH_CHECK(table_class == 0
                        ? symbol <= 11
                        : symbol == 0x00 || symbol == 0xF0 || (bits >= 1 && bits <= 10),
                    source, ": JPEG Huffman table at offset ", i,
                    " holds a symbol the format does not allow (damaged file)");
        }
        if (table_class <= 1 && id <= 3) defined[table_class][id] = true;
        at += 17 + count;
      }
    }
    i += 2 + length;
  }
  // Only a header that walks cleanly from SOI to a scan is handed to stb; what follows the last
  // scan (a truncated file, junk) stb reports as an error itself.
  ECH_CHECK(scanned, source, ": JPEG markers before offset ", i,
            " do not lead to a scan (damaged file)");
  for (int c = 0; c < components; ++c)
    ECH_CHECK(decoded[c], source, ": JPEG component ", int{component_ids[c]}, " has no ",
              progressive ? "DC scan" : "scan", " before offset ", i,
              ": stb_image would leave its pixels unset (truncated or damaged file)");
}

[[maybe_unused]] uint32_t little_endian(const std::vector<uint8_t>& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | b[at + static_cast<size_t>(k)];
  return v;
}

// Checks a BMP before stb_image decodes it.
// - stb_image reads past the end of a file as zeros, so a BMP header claiming more rows than the
//   file holds would decode into an image of mostly invented pixels (a 60-byte file into
//   megapixels). The uncompressed pixel array must fit: offset + stride * |height| bytes.
// - stb_image expands 1-, 4- and 8-bit pixels through a 256-entry palette on its stack that holds
//   only the colours the file has between its header and its pixels: an index past them decodes
//   to whatever the stack held, different from run to run (found by fuzz_diff_jpeg in CI, stop
//   37). Every index is checked against the colours stb reads (its count, from the pixel offset).
[[maybe_unused]] void check_bmp(const std::vector<uint8_t>& b, const std::string& source) {
  // The header must be whole too: stb would read the missing fields as zeros (fuzz_diff_jpeg).
  ECH_CHECK(b.size() >= 18, source, ": BMP of ", b.size(), " bytes ends inside its file header",
            " (truncated file)");
  const uint32_t header = little_endian(b, 14, 4);
  ECH_CHECK(b.size() >= 14 + uint64_t{header}, source, ": BMP header of ", header,
            " bytes ends past the end of the ", b.size(), "-byte file (truncated file)");
  ECH_CHECK(header == 12 || header == 40 || header == 56 || header == 108 || header == 124, source,
            ": BMP header of ", header, " bytes is none of the kinds decoded (12, 40, 56, 108 or ",
            "124 bytes)");
  int64_t width = 0, height = 0;
  uint32_t bits = 0, compression = 0;
  if (header == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes
    width = little_endian(b, 18, 2);
    height = little_endian(b, 20, 2);
    bits = little_endian(b, 24, 2);
  } else {
    width = static_cast<int32_t>(little_endian(b, 18, 4));
    height = static_cast<int32_t>(little_endian(b, 22, 4));
    bits = little_endian(b, 28, 2);
    compression = little_endian(b, 30, 4);
  }
  // stb refuses RLE and the embedded JPEG/PNG kinds, but it compares the field as a signed int:
  // a value of 2^31 or more would pass as uncompressed, unchecked here (fuzz_diff_jpeg).
  ECH_CHECK(compression == 0 || compression == 3, source, ": BMP compression ", compression,
            " is not supported (only uncompressed and bit-field BMPs are decoded)");
  // Row stride < 2^47 and rows < 2^32: compared by division, as their product can overflow.
  const int64_t stride = (std::abs(width) * bits + 31) / 32 * 4, rows = std::abs(height);
  const int64_t offset = little_endian(b, 10, 4);
  const int64_t after_offset = static_cast<int64_t>(b.size()) - offset;
  ECH_CHECK(after_offset >= 0 && (stride == 0 || rows <= after_offset / stride), source,
            ": BMP of ", std::abs(width), "x", rows, " pixels at ", bits, " bits needs ", offset,
            " + ", stride, " x ", rows, " bytes, the file has ", b.size(), " (truncated file)");
  if (!(bits == 1 || bits == 4 || bits == 8) || compression != 0 || width <= 0) return;
  // The palette stb reads: what fits between the header (after the 14-byte file header) and the
  // pixels, in 4-byte entries, or in 3-byte ones with 24 bytes less for an OS/2 header.
  const int64_t colours = header == 12 ? (offset - 14 - 24) / 3 : (offset - 14 - header) >> 2;
  if (colours > 256) return;  // stb refuses it
  ECH_CHECK(colours > 0, source, ": BMP of ", bits, " bits per pixel has no palette: its pixels ",
            "start at offset ", offset, ", inside its ", header, "-byte header (damaged file)");
  if (colours >= (int64_t{1} << bits)) return;  // every index has a colour
  for (int64_t row = 0; row < rows; ++row) {
    const uint8_t* pixels = b.data() + offset + row * stride;
    for (int64_t column = 0; column < width; ++column) {
      const int index = packed_index(pixels, uint64_t(column), static_cast<int>(bits));
      ECH_CHECK(index < colours, source, ": BMP pixel at offset ",
                offset + row * stride + column * bits / 8, " (row ", row, " of the file, column ",
                column, ") uses palette index ", index, ", but the palette holds ", colours,
                " colours (damaged file)");
    }
  }
}

Image decode_stb(const std::vector<uint8_t>& bytes, const std::string& source, int channels) {
#ifdef ECHELON_WITH_STB
  ECH_CHECK(bytes.size() <= 0x7fffffff, source, ": image of ", bytes.size(), " bytes is too big");
  // stb_image would also take TGA (no magic number: almost any bytes pass for one), GIF, PSD, HDR,
  // PIC and PNM content, filling what is missing with zeros; the image folder reads PNG, JPEG and
  // BMP files, so only those get to stb (a fuzzed 24-byte "TGA" decoded into megapixels).
  const bool bmp = bytes.size() >= 2 && bytes[0] == 'B' && bytes[1] == 'M';
  ECH_CHECK(is_png(bytes) || bmp || (bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8),
            source, ": cannot decode image: not a PNG, JPEG or BMP file (", bytes.size(),
            " bytes; none of their signatures at offset 0)");
  if (bmp) check_bmp(bytes, source);
  int width = 0, height = 0, stored = 0;
  if (is_png(bytes)) check_png_crcs(bytes, source);
  if (is_jpeg(bytes)) {
    detail::check_jpeg_supported(bytes, source);
    // stb_image renders CMYK/YCCK colours wrongly (docs/fuzzing.md): refused rather than wrong.
    ECH_CHECK(detail::read_jpeg_frame(bytes).components != 4, source,
              ": CMYK/YCCK JPEG needs libjpeg-turbo, and this build decodes JPEG with stb_image "
              "(install libturbojpeg0-dev and rebuild, or convert the file to RGB)");
  }
  // stb takes any file starting FF D8 for a JPEG (is_jpeg also wants the next marker's FF).
  if (bytes.size() >= 2 && bytes[0] == 0xFF && bytes[1] == 0xD8) check_jpeg_for_stb(bytes, source);
  // The header first: dimensions are checked before stb allocates anything.
  if (stbi_info_from_memory(bytes.data(), static_cast<int>(bytes.size()), &width, &height,
                            &stored) != 0)
    detail::check_image_dimensions(width, height, source, "image");
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes.data(), static_cast<int>(bytes.size()), &width, &height, &stored,
                            channels),
      &stbi_image_free);
  ECH_CHECK(pixels != nullptr, source, ": cannot decode image (", bytes.size(),
            " bytes; stb_image: ", stbi_failure_reason() ? stbi_failure_reason() : "unknown", ")");
  return {height, width, channels, detail::to_planar(pixels.get(), height, width, channels)};
#else
  (void)bytes;
  (void)channels;
  ECH_FAIL(source, ": cannot decode: this build has no stb_image (ECHELON_WITH_STB)");
#endif
}

Image decode_turbo(const std::vector<uint8_t>& bytes, const std::string& source, int channels,
                   int scale_denom = 1) {
  const detail::Interleaved hwc =
      detail::decode_jpeg_interleaved(bytes, source, channels, scale_denom);
  return {hwc.height, hwc.width, channels,
          detail::to_planar(hwc.pixels, hwc.height, hwc.width, channels)};
}

#ifdef ECHELON_WITH_STB
void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}
#endif

void check_encodable(const Image& image, const char* op) {
  ECH_CHECK(image.height > 0 && image.width > 0 && (image.channels == 1 || image.channels == 3) &&
                static_cast<int64_t>(image.pixels.size()) == image.numel(),
            op, ": bad image ", image.height, "x", image.width, "x", image.channels, " with ",
            image.pixels.size(), " bytes");
}

}  // namespace

Image decode_image(const std::vector<uint8_t>& bytes, const std::string& source, int channels,
                   ImageDecoder decoder) {
  ECH_CHECK(channels == 1 || channels == 3, source, ": channels must be 1 or 3, got ", channels);
  ECH_CHECK(!bytes.empty(), source, ": empty image file");
  if (decoder == ImageDecoder::TurboJpeg ||
      (decoder == ImageDecoder::Auto && have_turbojpeg() && is_jpeg(bytes)))
    return decode_turbo(bytes, source, channels);
  return decode_stb(bytes, source, channels);
}

Image decode_image_scaled(const std::vector<uint8_t>& bytes, const std::string& source,
                          int channels, int64_t min_height, int64_t min_width) {
  if (!have_turbojpeg() || !is_jpeg(bytes)) return decode_image(bytes, source, channels);
  ECH_CHECK(channels == 1 || channels == 3, source, ": channels must be 1 or 3, got ", channels);
  const detail::JpegHeader header = detail::read_jpeg_header(bytes, source);
  const int height = header.height, width = header.width;
  // The smallest DCT scale whose output (ceil(dim / denom)) still covers the target.
  int denom = 8;
  while (denom > 1 &&
         ((height + denom - 1) / denom < min_height || (width + denom - 1) / denom < min_width))
    denom /= 2;
  return decode_turbo(bytes, source, channels, denom);
}

std::vector<uint8_t> encode_png(const Image& image) {
  check_encodable(image, "encode_png");
  std::vector<uint8_t> out;
#ifdef ECHELON_WITH_STB
  const int w = static_cast<int>(image.width), h = static_cast<int>(image.height);
  const int c = static_cast<int>(image.channels);
  const std::vector<uint8_t> hwc = detail::to_interleaved(image);
  ECH_CHECK(stbi_write_png_to_func(&append_bytes, &out, w, h, c, hwc.data(), w * c) != 0,
            "encode_png: stb_image_write failed");
#else
  ECH_FAIL("encode_png: this build has no stb (ECHELON_WITH_STB)");
#endif
  return out;
}

std::vector<uint8_t> encode_jpeg(const Image& image, int quality) {
  check_encodable(image, "encode_jpeg");
  std::vector<uint8_t> out;
#ifdef ECHELON_WITH_STB
  const int w = static_cast<int>(image.width), h = static_cast<int>(image.height);
  const std::vector<uint8_t> hwc = detail::to_interleaved(image);
  ECH_CHECK(stbi_write_jpg_to_func(&append_bytes, &out, w, h, static_cast<int>(image.channels),
                                   hwc.data(), quality) != 0,
            "encode_jpeg: stb_image_write failed");
#else
  (void)quality;
  ECH_FAIL("encode_jpeg: this build has no stb (ECHELON_WITH_STB)");
#endif
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  ECH_CHECK(file != nullptr, "cannot create '", path, "': ", std::strerror(errno));
  ECH_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), file.get()) == bytes.size(),
            "error writing '", path, "'");
}

}  // namespace echelon::data
