#include <echelon/data/io.h>

#include <sys/stat.h>
#include <zlib.h>
#ifdef ECHELON_WITH_LIBDEFLATE
#include <libdeflate.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>

#include <echelon/base/error.h>
#include <echelon/data/dataset.h>

namespace echelon::data {

namespace {

// Where a read or an inflate puts its bytes: a std::vector (read_file) or a uint8 tensor on small
// pages (read_file_tensor, whose callers keep views of it). resize() keeps the bytes so far;
// growing past the capacity at least doubles it.
class VectorBytes {
 public:
  size_t size() const { return bytes_.size(); }
  uint8_t* data() { return bytes_.data(); }
  void reserve(size_t n) { bytes_.reserve(n); }
  void resize(size_t n) { bytes_.resize(n); }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

class TensorBytes {
 public:
  size_t size() const { return size_; }
  uint8_t* data() { return capacity_ ? storage_.data<uint8_t>() : nullptr; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    // Not zeroed: every byte below size_ is written before it is read.
    Tensor grown = empty_on_small_pages({static_cast<int64_t>(n)}, kUInt8);
    if (size_) std::memcpy(grown.data<uint8_t>(), storage_.data<uint8_t>(), size_);
    storage_ = std::move(grown);
    capacity_ = n;
  }
  void resize(size_t n) {
    if (n > capacity_) reserve(std::max(n, 2 * capacity_));
    size_ = n;
  }
  Tensor take() {
    reserve(1);  // an empty file still gets a (0-byte view of a) tensor
    return storage_.slice(0, 0, static_cast<int64_t>(size_));
  }

 private:
  Tensor storage_;
  size_t size_ = 0, capacity_ = 0;
};

template <typename Bytes>
void read_raw_into(const std::string& path, Bytes& bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  ECH_CHECK(file != nullptr, "cannot open '", path, "': ", std::strerror(errno));
  // One allocation for a regular file: growing by doubling copied the data up to twice and
  // faulted in twice its size in fresh pages (page faults dominate loading Fashion-MNIST).
  struct stat info {};
  if (::fstat(::fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode))
    bytes.reserve(static_cast<size_t>(info.st_size));
  constexpr size_t kChunk = 1 << 16;
  for (;;) {
    const size_t at = bytes.size();
    bytes.resize(at + kChunk);
    const size_t n = std::fread(bytes.data() + at, 1, kChunk, file.get());
    bytes.resize(at + n);
    if (n == 0) break;
  }
  ECH_CHECK(!std::ferror(file.get()), "error reading '", path, "' at byte ", bytes.size());
}

// One gzip member by zlib, from raw[offset] on, appended to out; returns the offset after it.
// Also the diagnosis of a member libdeflate rejects: its errors say truncated or corrupt, and
// after how many decompressed bytes.
template <typename Bytes>
size_t inflate_member_zlib(std::span<const uint8_t> raw, size_t offset, int member,
                           const std::string& path, Bytes& out) {
  z_stream stream{};
  ECH_CHECK(inflateInit2(&stream, 16 + MAX_WBITS) == Z_OK, "zlib: cannot start inflating '", path,
            "'");
  std::unique_ptr<z_stream, int (*)(z_streamp)> guard(&stream, &inflateEnd);
  stream.next_in = const_cast<uint8_t*>(raw.data() + offset);
  stream.avail_in = static_cast<uInt>(std::min<size_t>(raw.size() - offset, 1u << 30));
  int status = Z_OK;
  constexpr size_t kChunk = 1 << 16;
  while (status == Z_OK) {
    const size_t at = out.size();
    out.resize(at + kChunk);
    stream.next_out = out.data() + at;
    stream.avail_out = kChunk;
    status = inflate(&stream, Z_NO_FLUSH);
    out.resize(at + kChunk - stream.avail_out);
    // A member larger than 1 GiB of input is fed in slices.
    if (status == Z_BUF_ERROR && stream.avail_in == 0 && stream.next_in < raw.data() + raw.size()) {
      const size_t next = static_cast<size_t>(stream.next_in - raw.data());
      stream.avail_in = static_cast<uInt>(std::min<size_t>(raw.size() - next, 1u << 30));
      status = Z_OK;
    }
  }
  ECH_CHECK(status == Z_STREAM_END, "'", path, "': gzip stream is ",
            status == Z_BUF_ERROR ? "truncated" : "corrupt", " in member ", member, " at offset ",
            offset, " after ", out.size(),
            " decompressed bytes (zlib: ", stream.msg ? stream.msg : zError(status), ")");
  return static_cast<size_t>(stream.next_in - raw.data());
}

#ifdef ECHELON_WITH_LIBDEFLATE
// One gzip member by libdeflate (one call into a buffer big enough, CRC included), appended to
// out; returns the offset after it, or nothing when libdeflate rejects the member. `room`: the
// expected output size, doubled while it is too small.
template <typename Bytes>
std::optional<size_t> inflate_member_libdeflate(std::span<const uint8_t> raw, size_t offset,
                                                size_t room, Bytes& out) {
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> inflater(
      libdeflate_alloc_decompressor(), &libdeflate_free_decompressor);
  ECH_CHECK(inflater != nullptr, "libdeflate: cannot allocate a decompressor");
  const size_t before = out.size();
  room = std::max<size_t>(room, 1 << 16);
  for (;;) {
    out.resize(before + room);
    size_t used_in = 0, produced = 0;
    const libdeflate_result result =
        libdeflate_gzip_decompress_ex(inflater.get(), raw.data() + offset, raw.size() - offset,
                                      out.data() + before, room, &used_in, &produced);
    if (result == LIBDEFLATE_SUCCESS) {
      out.resize(before + produced);
      return offset + used_in;
    }
    if (result != LIBDEFLATE_INSUFFICIENT_SPACE || room > (size_t{1} << 62)) {
      out.resize(before);
      return std::nullopt;
    }
    room *= 2;
  }
}
#endif

template <typename Bytes>
void read_into(const std::string& path, Inflater inflater, Bytes& out) {
  Bytes file;
  read_raw_into(path, file);
  if (file.size() < 2 || file.data()[0] != 0x1f || file.data()[1] != 0x8b) {  // not gzip: as is
    out = std::move(file);
    return;
  }
  const std::span<const uint8_t> raw(file.data(), file.size());
  // Every member in turn (what `cat a.gz b.gz` and pigz make). zlib's gzread used to do this, but
  // it silently ignores bytes after a member that do not start another one: a damaged or
  // appended-to file then loaded short. Here anything after the last member is an error.
  // A gzip file ends with its last member's size mod 2^32 (ISIZE): the whole output of the usual
  // one-member file, reserved at once (see read_raw_into). Only a hint, so a damaged trailer
  // cannot make it reserve much: at most 64 times the input; the output grows as usual past it.
  const size_t last_member_size = raw.size() >= 4 ? read_le32(raw.data() + raw.size() - 4) : 0;
  const size_t expected = std::min(last_member_size, raw.size() * 64);
  out.reserve(expected);
  size_t offset = 0;
  int member = 0;
  while (offset < raw.size()) {
    ECH_CHECK(raw.size() - offset >= 2 && raw[offset] == 0x1f && raw[offset + 1] == 0x8b, "'", path,
              "': ", raw.size() - offset, " bytes after gzip member ", member, " at offset ",
              offset, " are not another gzip member (trailing garbage)");
    std::optional<size_t> next;
#ifdef ECHELON_WITH_LIBDEFLATE
    // libdeflate skips a header CRC (flag FHCRC, byte 3 bit 1) unchecked; zlib checks it. Such
    // members are rare (gzip never writes one), so zlib takes them.
    const bool header_crc = raw.size() - offset > 3 && (raw[offset + 3] & 0x02) != 0;
    if (inflater == Inflater::Fastest && !header_crc)
      next = inflate_member_libdeflate(raw, offset,
                                       expected > out.size() ? expected - out.size() : 0, out);
#else
    (void)inflater;
#endif
    offset = next ? *next : inflate_member_zlib(raw, offset, member, path, out);
    ++member;
  }
}

}  // namespace

std::vector<uint8_t> read_file_raw(const std::string& path) {
  VectorBytes bytes;
  read_raw_into(path, bytes);
  return bytes.take();
}

bool libdeflate_available() {
#ifdef ECHELON_WITH_LIBDEFLATE
  return true;
#else
  return false;
#endif
}

std::vector<uint8_t> read_file(const std::string& path, Inflater inflater) {
  VectorBytes out;
  read_into(path, inflater, out);
  return out.take();
}

Tensor read_file_tensor(const std::string& path, Inflater inflater) {
  TensorBytes out;
  read_into(path, inflater, out);
  return out.take();
}

}  // namespace echelon::data
