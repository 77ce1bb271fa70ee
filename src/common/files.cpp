#include "zero/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "zero/error.h"

namespace zero {
namespace {

std::string system_error(const char* what, const std::string& path) {
  return std::string(what) + " '" + path + "': " + std::strerror(errno);
}

// Closes the descriptor and, unless released, removes the half-written temporary file.
struct Temporary {
  int fd = -1;
  std::string path;
  bool keep = false;
  ~Temporary() {
    if (fd >= 0) ::close(fd);
    if (!keep) ::unlink(path.c_str());
  }
};

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ZERO_CHECK(fd >= 0, system_error("cannot open directory for fsync", dir));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  ZERO_CHECK(rc == 0, system_error("cannot fsync directory", dir));
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  Temporary temporary;
  temporary.path = path + ".tmp";
  temporary.fd = ::open(temporary.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (temporary.fd < 0) {
    temporary.keep = true;  // nothing was created
    ZERO_CHECK(false, system_error("cannot create", temporary.path));
  }
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(temporary.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ZERO_CHECK(n > 0, system_error("cannot write", temporary.path));
    done += static_cast<size_t>(n);
  }
  ZERO_CHECK(::fsync(temporary.fd) == 0, system_error("cannot fsync", temporary.path));
  ZERO_CHECK(::rename(temporary.path.c_str(), path.c_str()) == 0,
             system_error(("cannot rename '" + temporary.path + "' to").c_str(), path));
  temporary.keep = true;
  const std::string parent = std::filesystem::path(path).parent_path().string();
  fsync_directory(parent.empty() ? "." : parent);
}

}  // namespace zero
