// File reading for the dataset loaders: whole files, transparently gunzipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <echelon/tensor/tensor.h>

namespace echelon::data {

// Which library inflates gzip: Fastest is libdeflate where the build has it (about twice zlib's
// speed), else zlib; Zlib forces zlib (tests compare the two). Both verify each member's CRC-32
// and length; a member with a header CRC goes to zlib either way. libdeflate may accept a few
// malformations zlib rejects in the deflate data itself, bytes that still pass the CRC-32 and the
// length (tests/fuzz/diff_gzip.cpp holds Zlib to zlib's exact verdicts, Fastest to zlib's bytes).
enum class Inflater { Fastest, Zlib };
// Whether this build has libdeflate (CMake found libdeflate-dev).
bool libdeflate_available();

// The bytes of `path`. When the file starts with the gzip magic (1f 8b) it is decompressed (every
// member of a multi-member file); a truncated or corrupt gzip member, or bytes after the last
// member that are not another member, throw echelon::Error naming the file, member and offset
// (zlib's diagnosis: a member libdeflate rejects is inflated again by zlib to name the error).
std::vector<uint8_t> read_file(const std::string& path, Inflater inflater = Inflater::Fastest);
// read_file's bytes in a 1-D uint8 CPU tensor on small pages (empty_on_small_pages): a data set
// keeps a view of it as its pixels, without a copy of tens of MB (Fashion-MNIST's start-up).
Tensor read_file_tensor(const std::string& path, Inflater inflater = Inflater::Fastest);
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
