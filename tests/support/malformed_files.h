// Generators of well-formed and deliberately damaged input files for the tests that feed them to
// Echelon (tests/cpu/probe_test.cpp): IDX and CIFAR-10 files, gzip members, PNG/JPEG files with
// patched headers, chunk CRCs or frame headers, and safetensors files with an edited header.
#pragma once

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace echelon::test {

using Bytes = std::vector<uint8_t>;

inline Bytes read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read ", path.string());
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  REQUIRE_MESSAGE(out.good(), "cannot write ", path.string());
}

inline void put_be32(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

inline void set_be32(Bytes& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
}

// An IDX file: magic, big-endian dims, then `payload` (not checked against the dims, so that a
// header can lie).
inline Bytes idx_file(uint32_t magic, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes out;
  put_be32(out, magic);
  for (const uint32_t d : dims) put_be32(out, d);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// IDX images (n, 28, 28) with varied pixels, and labels i % 10.
inline Bytes idx_images(uint32_t n) {
  Bytes pixels(static_cast<size_t>(n) * 28 * 28);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 31 % 251);
  return idx_file(0x803, {n, 28, 28}, pixels);
}
inline Bytes idx_labels(uint32_t n) {
  Bytes labels(n);
  for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  return idx_file(0x801, {n}, labels);
}

// One gzip member holding `bytes` (zlib's deflate with a gzip wrapper).
inline Bytes gzip_member(const Bytes& bytes) {
  z_stream stream{};
  REQUIRE(deflateInit2(&stream, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&stream, static_cast<uLong>(bytes.size())) + 32);
  stream.next_in = const_cast<uint8_t*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  const int status = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  REQUIRE(status == Z_STREAM_END);
  return out;
}

// `bytes` as two gzip members back to back (what `cat a.gz b.gz` makes): a valid gzip file.
inline Bytes gzip_two_members(const Bytes& bytes) {
  const size_t half = bytes.size() / 2;
  Bytes out = gzip_member(Bytes(bytes.begin(), bytes.begin() + static_cast<long>(half)));
  const Bytes second = gzip_member(Bytes(bytes.begin() + static_cast<long>(half), bytes.end()));
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

// `records` CIFAR-10 records (label byte, 3072 pixel bytes), labels i % 10.
inline Bytes cifar_records(int records) {
  Bytes out;
  for (int i = 0; i < records; ++i) {
    out.push_back(static_cast<uint8_t>(i % 10));
    for (int b = 0; b < 3072; ++b) out.push_back(static_cast<uint8_t>((i * 7 + b) & 0xFF));
  }
  return out;
}

// Offset of the first PNG chunk of `type` (its length field), after the 8-byte signature.
inline size_t png_chunk(const Bytes& png, const std::string& type) {
  size_t at = 8;
  while (at + 12 <= png.size()) {
    const uint32_t length = uint32_t{png[at]} << 24 | uint32_t{png[at + 1]} << 16 |
                            uint32_t{png[at + 2]} << 8 | png[at + 3];
    if (std::string(png.begin() + static_cast<long>(at) + 4,
                    png.begin() + static_cast<long>(at) + 8) == type)
      return at;
    at += 12 + length;
  }
  FAIL("no PNG chunk ", type);
  return 0;
}

// The PNG with one bit of chunk `type`'s stored CRC flipped.
inline Bytes png_with_bad_crc(Bytes png, const std::string& type) {
  const size_t at = png_chunk(png, type);
  const uint32_t length = uint32_t{png[at]} << 24 | uint32_t{png[at + 1]} << 16 |
                          uint32_t{png[at + 2]} << 8 | png[at + 3];
  png[at + 8 + length] ^= 0x01;
  return png;
}

// The PNG claiming width x height in IHDR, with a correct CRC (so only the size is wrong).
inline Bytes png_claiming(Bytes png, uint32_t width, uint32_t height) {
  const size_t at = png_chunk(png, "IHDR");
  set_be32(png, at + 8, width);
  set_be32(png, at + 12, height);
  set_be32(png, at + 8 + 13, static_cast<uint32_t>(crc32(0, png.data() + at + 4, 4 + 13)));
  return png;
}

// Offset of the JPEG's first frame header (SOFn marker), walking the marker segments.
inline size_t jpeg_sof(const Bytes& jpeg) {
  size_t at = 2;
  while (at + 4 < jpeg.size() && !(jpeg[at + 1] >= 0xC0 && jpeg[at + 1] <= 0xC3))
    at += 2 + (size_t{jpeg[at + 2]} << 8 | jpeg[at + 3]);
  REQUIRE(at + 10 < jpeg.size());
  return at;
}

// The JPEG with its frame header's precision, marker or dimensions patched.
inline Bytes jpeg_with_precision(Bytes jpeg, uint8_t bits) {
  jpeg[jpeg_sof(jpeg) + 4] = bits;
  return jpeg;
}
inline Bytes jpeg_with_marker(Bytes jpeg, uint8_t marker) {
  jpeg[jpeg_sof(jpeg) + 1] = marker;
  return jpeg;
}
inline Bytes jpeg_claiming(Bytes jpeg, uint16_t width, uint16_t height) {
  const size_t sof = jpeg_sof(jpeg);
  jpeg[sof + 5] = static_cast<uint8_t>(height >> 8);
  jpeg[sof + 6] = static_cast<uint8_t>(height);
  jpeg[sof + 7] = static_cast<uint8_t>(width >> 8);
  jpeg[sof + 8] = static_cast<uint8_t>(width);
  return jpeg;
}

// The safetensors file with the first `from` in its JSON header replaced by `to` (the header
// length is rewritten; the tensor bytes stay as they were).
inline Bytes safetensors_edit(const Bytes& file, const std::string& from, const std::string& to) {
  REQUIRE(file.size() >= 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = length << 8 | file[i];
  REQUIRE(8 + length <= file.size());
  std::string header(file.begin() + 8, file.begin() + 8 + static_cast<long>(length));
  const size_t at = header.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, "'", from, "' not in the header: ", header);
  header.replace(at, from.size(), to);
  Bytes out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), file.begin() + 8 + static_cast<long>(length), file.end());
  return out;
}

}  // namespace echelon::test
