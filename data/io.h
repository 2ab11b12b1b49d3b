// File reading for the dataset loaders: whole files, transparently gunzipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace echelon::data {

// The bytes of `path`. When the file starts with the gzip magic (1f 8b) it is decompressed (every
// member of a multi-member file); a truncated or corrupt gzip member, or bytes after the last
// member that are not another member, throw echelon::Error naming the file, member and offset.
std::vector<uint8_t> read_file(const std::string& path);
// The bytes of `path`, never decompressed.
std::vector<uint8_t> read_file_raw(const std::string& path);

// Little-endian 32-bit value at p (gzip trailers).
inline uint32_t read_le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
// Big-endian 32-bit value at `offset` (IDX headers).
inline uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace echelon::data
