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
  // zlib's gz reader does the buffering and the member loop: it inflates every member of a
  // multi-member file (what `cat a.gz b.gz` and pigz make) and passes a file without the gzip
  // magic through unchanged.
  std::unique_ptr<gzFile_s, int (*)(gzFile)> file(gzopen(path.c_str(), "rb"), &gzclose);
  ECH_CHECK(file != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  ECH_CHECK(gzbuffer(file.get(), 1 << 17) == 0, "zlib: cannot size the buffer for '", path, "'");
  std::vector<uint8_t> bytes;
  uint8_t chunk[1 << 16];
  int n;
  while ((n = gzread(file.get(), chunk, sizeof(chunk))) > 0)
    bytes.insert(bytes.end(), chunk, chunk + n);
  // At the end of the input gzread returns 0 and leaves Z_BUF_ERROR when the file ended inside a
  // gzip stream; a read error or corrupt data returns -1.
  int status = Z_OK;
  const std::string message = gzerror(file.get(), &status);
  if (n == 0 && status == Z_OK) return bytes;
  ECH_CHECK(status != Z_ERRNO, "error reading '", path, "' after ", bytes.size(),
            " bytes: ", message);
  ECH_FAIL("'", path, "': gzip stream is ", status == Z_BUF_ERROR ? "truncated" : "corrupt",
           " after ", bytes.size(), " decompressed bytes (zlib: ", message, ")");
}

}  // namespace echelon::data
