// Differential: our reader (data/io.cpp read_file, what the IDX loader calls) against a reference
// inflate written here on zlib's inflate(): every gzip member is inflated in turn; a truncated or
// corrupt member, or bytes after the last member that are not another member, are errors. Input
// without the gzip magic passes through.
// - read_file(Inflater::Zlib) and the reference: both reject, or both accept with the same bytes.
// - read_file (Inflater::Fastest: libdeflate where the build has it): whatever the reference
//   accepts, with the same bytes. It may accept what zlib rejects inside the deflate data
//   (libdeflate checks the CRC-32 and the length, not every rule zlib enforces), so that is not a
//   finding.
#include "fuzz_common.h"

#include <zlib.h>

#include <echelon/data/io.h>

namespace {

// Returns false when the stream is not a sequence of complete gzip members.
bool reference_gunzip(const uint8_t* data, size_t size, std::vector<uint8_t>& out) {
  if (size < 2 || data[0] != 0x1f || data[1] != 0x8b) {
    out.assign(data, data + size);
    return true;
  }
  size_t offset = 0;
  while (offset < size) {
    if (size - offset < 2 || data[offset] != 0x1f || data[offset + 1] != 0x8b) return false;
    z_stream stream{};
    if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) return false;
    stream.next_in = const_cast<uint8_t*>(data + offset);
    stream.avail_in = static_cast<uInt>(size - offset);
    int status = Z_OK;
    uint8_t chunk[1 << 14];
    while (status == Z_OK) {
      stream.next_out = chunk;
      stream.avail_out = sizeof(chunk);
      status = inflate(&stream, Z_NO_FLUSH);
      out.insert(out.end(), chunk, chunk + (sizeof(chunk) - stream.avail_out));
      if (out.size() > (size_t{64} << 20)) status = Z_MEM_ERROR;
    }
    const size_t used = size - offset - stream.avail_in;
    inflateEnd(&stream);
    if (status != Z_STREAM_END) return false;
    offset += used;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = echelon::fuzz;
  const std::string path =
      fuzz::write_scratch("data.gz", std::string_view(reinterpret_cast<const char*>(data), size));
  using echelon::data::Inflater;
  std::vector<uint8_t> ours[2];  // [Zlib, Fastest]
  bool ours_ok[2] = {false, false};
  for (const Inflater inflater : {Inflater::Zlib, Inflater::Fastest}) {
    const int i = inflater == Inflater::Fastest;
    fuzz::expect_parse_or_error(path, [&] {
      ours[i] = echelon::data::read_file(path, inflater);
      ours_ok[i] = true;
    });
  }
  std::vector<uint8_t> reference;
  const bool reference_ok = reference_gunzip(data, size, reference);
  if (ours_ok[0] && !reference_ok)
    fuzz::finding("read_file (zlib) accepted a stream zlib's inflate rejects");
  if (reference_ok && reference.size() <= (size_t{64} << 20)) {
    if (!ours_ok[0]) fuzz::finding("read_file (zlib) rejected a stream zlib's inflate accepts");
    if (!ours_ok[1])
      fuzz::finding("read_file (libdeflate) rejected a stream zlib's inflate accepts");
  }
  for (int i = 0; i < 2; ++i)
    if (ours_ok[i] && reference_ok && ours[i] != reference)
      fuzz::finding(i ? "read_file (libdeflate) and zlib's inflate return different bytes"
                      : "read_file (zlib) and zlib's inflate return different bytes");
  return 0;
}
