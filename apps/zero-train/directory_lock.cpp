#include "directory_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "zero/error.h"

namespace zero::train {

namespace {

// What the holder wrote: "pid P on host H", or a note that it could not be read.
std::string holder_of(int fd) {
  char text[256] = {};
  const ssize_t got = ::pread(fd, text, sizeof(text) - 1, 0);
  std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : std::string();
  while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
  return holder.empty() ? "holder unknown" : holder;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what) {
  // See Note [Directory lock].
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  ZERO_CHECK(!error, "cannot create ", what, " ", dir, ": ", error.message());
  const std::string path = (std::filesystem::path(dir) / ".zero-lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  ZERO_CHECK(fd_ >= 0, "cannot open the lock file ", path, " of ", what, " ", dir, ": ",
             std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int lock_error = errno;
    const std::string holder = holder_of(fd_);
    ::close(fd_);
    fd_ = -1;
    ZERO_CHECK(lock_error != EWOULDBLOCK, what, " ", dir, " is in use by another job (", holder,
               ", lock file ", path, "); give this job its own directory or wait for that one");
    ZERO_CHECK(false, "cannot lock ", path, " of ", what, " ", dir, ": ", std::strerror(lock_error));
  }
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string holder = "pid " + std::to_string(::getpid()) + " on host " + host + "\n";
  // Best effort: the lock itself is what excludes; the text only names the holder.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, holder.data(), holder.size(), 0);
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

}  // namespace zero::train
