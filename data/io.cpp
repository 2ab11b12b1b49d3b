#include <echelon/data/io.h>

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include <echelon/base/error.h>

namespace echelon::data {

std::vector<uint8_t> read_file_raw(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  ECH_CHECK(file != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), file.get())) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  ECH_CHECK(!std::ferror(file.get()), "error reading '", path, "' at byte ", bytes.size());
  return bytes;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> raw = read_file_raw(path);
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;
  // Inflate with gzip header detection (windowBits 16 + MAX_WBITS).
  z_stream stream{};
  ECH_CHECK(inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK, "zlib init failed for '", path, "'");
  std::vector<uint8_t> out(raw.size() * 4 + 1024);
  stream.next_in = raw.data();
  stream.avail_in = static_cast<uInt>(raw.size());
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (stream.total_out == out.size()) out.resize(out.size() * 2);
    stream.next_out = out.data() + stream.total_out;
    stream.avail_out = static_cast<uInt>(out.size() - stream.total_out);
    status = inflate(&stream, Z_NO_FLUSH);
    if (status == Z_BUF_ERROR && stream.avail_in == 0) break;  // input ended early
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) break;
  }
  const size_t produced = stream.total_out;
  const std::string message = stream.msg ? stream.msg : "";
  inflateEnd(&stream);
  ECH_CHECK(status == Z_STREAM_END, "'", path, "': gzip stream is ",
            status == Z_BUF_ERROR ? "truncated" : "corrupt", " after ", produced,
            " decompressed bytes", message.empty() ? "" : " (", message,
            message.empty() ? "" : ")");
  out.resize(produced);
  return out;
}

}  // namespace echelon::data
