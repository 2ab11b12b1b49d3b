#include <echelon/data/io.h>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
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
  // One allocation for a regular file: growing by doubling copied the data up to twice and
  // faulted in twice its size in fresh pages (page faults dominate loading Fashion-MNIST).
  struct stat info {};
  if (::fstat(::fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode))
    bytes.reserve(static_cast<size_t>(info.st_size));
  uint8_t chunk[1 << 16];
  size_t n;
  while ((n = std::fread(chunk, 1, sizeof(chunk), file.get())) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  ECH_CHECK(!std::ferror(file.get()), "error reading '", path, "' at byte ", bytes.size());
  return bytes;
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> raw = read_file_raw(path);
  if (raw.size() < 2 || raw[0] != 0x1f || raw[1] != 0x8b) return raw;  // not gzip: as is
  // Every member in turn (what `cat a.gz b.gz` and pigz make). zlib's gzread used to do this, but
  // it silently ignores bytes after a member that do not start another one: a damaged or
  // appended-to file then loaded short. Here anything after the last member is an error.
  std::vector<uint8_t> out;
  // A gzip file ends with its last member's size mod 2^32 (ISIZE): the whole output of the usual
  // one-member file, reserved at once (see read_file_raw). Only a hint, so a damaged trailer
  // cannot make it reserve much: at most 64 times the input; the output grows as usual past it.
  const size_t last_member_size = raw.size() >= 4 ? read_le32(raw.data() + raw.size() - 4) : 0;
  out.reserve(std::min(last_member_size, raw.size() * 64));
  size_t offset = 0;
  int member = 0;
  while (offset < raw.size()) {
    ECH_CHECK(raw.size() - offset >= 2 && raw[offset] == 0x1f && raw[offset + 1] == 0x8b, "'", path,
              "': ", raw.size() - offset, " bytes after gzip member ", member, " at offset ",
              offset, " are not another gzip member (trailing garbage)");
    z_stream stream{};
    ECH_CHECK(inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK, "zlib: cannot start inflating '", path,
              "'");
    std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&stream, &inflateEnd);
    stream.next_in = raw.data() + offset;
    stream.avail_in = static_cast<uInt>(std::min<size_t>(raw.size() - offset, 1u << 30));
    int status = Z_OK;
    uint8_t chunk[1 << 16];
    while (status == Z_OK) {
      stream.next_out = chunk;
      stream.avail_out = sizeof(chunk);
      status = inflate(&stream, Z_NO_FLUSH);
      out.insert(out.end(), chunk, chunk + (sizeof(chunk) - stream.avail_out));
      // A member larger than 1 GiB of input is fed in slices.
      if (status == Z_BUF_ERROR && stream.avail_in == 0 &&
          stream.next_in < raw.data() + raw.size()) {
        const size_t at = static_cast<size_t>(stream.next_in - raw.data());
        stream.avail_in = static_cast<uInt>(std::min<size_t>(raw.size() - at, 1u << 30));
        status = Z_OK;
      }
    }
    ECH_CHECK(status == Z_STREAM_END, "'", path, "': gzip stream is ",
              status == Z_BUF_ERROR ? "truncated" : "corrupt", " in member ", member, " at offset ",
              offset, " after ", out.size(),
              " decompressed bytes (zlib: ", stream.msg ? stream.msg : zError(status), ")");
    offset = static_cast<size_t>(stream.next_in - raw.data());
    ++member;
  }
  return out;
}

}  // namespace echelon::data
