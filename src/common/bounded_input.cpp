#include "common/bounded_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "zero/error.h"

namespace zero {
namespace {

const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Closes the descriptor on every path out of read_regular_file.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_regular_file(const std::string& path, const std::string& what, int64_t max_bytes,
                              SymbolicLinks links) {
  // See Note [Bounded input]. O_NONBLOCK: opening a FIFO for reading would otherwise wait for
  // a writer; it does not affect reads of regular files. O_NOFOLLOW refuses a link in the
  // open itself (ELOOP), again with no window between a check and the use.
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC |
                    (links == SymbolicLinks::kRefuse ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);
  ZERO_CHECK(!(fd < 0 && errno == ELOOP && links == SymbolicLinks::kRefuse), what, " '", path,
             "' is a symbolic link; it must be a regular file (a link could lead anywhere)");
  ZERO_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  FdCloser closer{fd};
  struct stat info {};
  ZERO_CHECK(::fstat(fd, &info) == 0, "cannot stat ", what, " '", path, "': ", std::strerror(errno));
  ZERO_CHECK(S_ISREG(info.st_mode), what, " '", path, "' is ", file_type_name(info.st_mode),
             "; expected a regular file");
  ZERO_CHECK(info.st_size <= max_bytes, what, " '", path, "' is ", info.st_size,
             " bytes; at most ", max_bytes, " are accepted");
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0 && errno == EINTR) continue;
    ZERO_CHECK(got >= 0, "cannot read ", what, " '", path, "': ", std::strerror(errno));
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
    ZERO_CHECK(static_cast<int64_t>(text.size()) <= max_bytes, what, " '", path,
               "' grew past ", max_bytes, " bytes while it was read; at most ", max_bytes,
               " are accepted");
  }
  return text;
}

void check_json_depth(int depth, const std::string& source) {
  ZERO_CHECK(depth < kMaxJsonDepth, source, ": JSON nested deeper than ", kMaxJsonDepth,
             " levels (objects and arrays inside each other); refused");
}

nlohmann::json parse_bounded_json(const std::string& text, const std::string& source) {
  using Json = nlohmann::json;
  const Json::parser_callback_t callback = [&](int depth, Json::parse_event_t event, Json&) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      check_json_depth(depth, source);
    }
    return true;
  };
  try {
    return Json::parse(text, callback);
  } catch (const Json::exception& e) {
    throw Error(detail::concat(source, ": invalid JSON: ", e.what()));
  }
}

}  // namespace zero
