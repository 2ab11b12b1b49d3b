#include <echelon/base/file.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <echelon/base/error.h>

namespace echelon {

std::string read_file(const std::string& path, const char* what) {
  std::error_code error;
  ECH_CHECK(!std::filesystem::is_directory(path, error), path, ": is a directory, not a ", what,
            " file");
  std::ifstream in(path, std::ios::binary);
  ECH_CHECK(
      in.good(), path, ": cannot open ", what, " file for reading: ",
      std::filesystem::exists(path, error) ? "permission denied or unreadable" : "no such file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ECH_CHECK(!in.bad(), path, ": read error");
  return buffer.str();
}

namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* action) {
  ECH_FAIL(path, ": cannot ", action, ": ", std::strerror(errno));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::error_code error;
  ECH_CHECK(!std::filesystem::is_directory(target, error), path,
            ": is a directory, not a file name (cannot write a file over it)");
  const std::string temp = (dir / ("." + target.filename().string() + ".tmp")).string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_errno(temp, "create");
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t r = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(temp.c_str());
      errno = saved;
      fail_errno(temp, "write");
    }
    written += static_cast<size_t>(r);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    ::unlink(temp.c_str());
    fail_errno(temp, "fsync");
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    ::unlink(temp.c_str());
    fail_errno(path, "rename the temporary file onto");
  }
  // Persist the rename itself.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace echelon
