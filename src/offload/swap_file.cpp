#include "offload/swap_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>
#include <vector>

#include "common/crc32c.h"
#include "common/env.h"
#include "common/host_accounting.h"
#include "zero/error.h"

namespace zero {
namespace {

int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

AlignedBuffer::AlignedBuffer(int64_t bytes) : bytes_(align_up(bytes)) {
  data_ = static_cast<char*>(std::aligned_alloc(kSwapAlignment, static_cast<size_t>(bytes_)));
  ZERO_CHECK(data_ != nullptr, "cannot allocate a staging buffer of ", bytes_,
             " bytes for NVMe offload");
  counted_ = count_unallocated_host_bytes(bytes_);  // not libtorch's: common/host_accounting.h
}

AlignedBuffer::~AlignedBuffer() {
  count_unallocated_host_bytes(-bytes_, counted_);
  std::free(data_);
}

SwapFile::SwapFile(std::string path, int64_t bytes, AsyncIo& io)
    : path_(std::move(path)), bytes_(bytes), io_(io), checksums_(env::swap_checksums()) {
  if (!checksums_) {
    static std::once_flag said;
    std::call_once(said, [] {
      std::fprintf(stderr, "zero: swap records are written and read without checksums "
                           "(ZERO_SWAP_CHECKSUMS=0): damage to swap files goes unseen\n");
    });
  }
  ZERO_INTERNAL_ASSERT(bytes_ % kSwapAlignment == 0, "swap file size ", bytes_, " not aligned");
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  fd_ = ::open(path_.c_str(), flags | O_DIRECT, 0600);
  direct_ = fd_ >= 0;
  if (fd_ < 0 && errno == EINVAL) {
    // The file system refuses O_DIRECT (tmpfs, some FUSE mounts): the same transfers through
    // the page cache. Said once per process.
    fd_ = ::open(path_.c_str(), flags, 0600);
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "zero: the file system of '%s' does not support O_DIRECT; swap files are "
                   "read and written through the page cache\n",
                   path_.c_str());
    });
  }
  ZERO_CHECK(fd_ >= 0, "cannot create swap file '", path_, "': ", errno_text());
  // Reserve the blocks now, so a full disk is met here and not mid-step.
  const int rc = ::posix_fallocate(fd_, 0, bytes_);
  if (rc != 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
    fd_ = -1;
    ZERO_CHECK(false, "cannot reserve ", bytes_, " bytes for swap file '", path_, "': ",
               std::strerror(rc));
  }
  seal();
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

void SwapFile::check_range(int64_t bytes, int64_t offset) const {
  ZERO_INTERNAL_ASSERT(bytes >= 0 && offset >= 0 && offset + bytes <= bytes_ &&
                           bytes % kSwapAlignment == 0 && offset % kSwapAlignment == 0,
                       "swap transfer of ", bytes, " bytes at ", offset, " in a file of ",
                       bytes_, " bytes");
}

uint32_t SwapFile::zeros_checksum(int64_t bytes) {
  auto known = zero_sums_.find(bytes);
  if (known != zero_sums_.end()) return known->second;
  static const std::vector<char> zeros(static_cast<size_t>(kSwapAlignment), 0);
  uint32_t crc = 0;
  for (int64_t done = 0; done < bytes; done += kSwapAlignment) {
    crc = crc32c(zeros.data(), static_cast<size_t>(std::min(kSwapAlignment, bytes - done)), crc);
  }
  zero_sums_.emplace(bytes, crc);
  return crc;
}

AsyncIo::Ticket SwapFile::read(void* buffer, int64_t bytes, int64_t offset,
                               const std::string& record) {
  check_range(bytes, offset);
  if (!checksums_) return io_.read(fd_, buffer, bytes, offset, path_);
  // Note [Swap record checksums].
  uint32_t expected = 0;
  auto written = sums_.find(offset);
  if (written != sums_.end()) {
    RecordSum& sum = written->second;
    ZERO_INTERNAL_ASSERT(sum.bytes == bytes, "swap read of ", bytes, " bytes at ", offset, " of '",
                         path_, "', where a record of ", sum.bytes, " bytes was written");
    if (sum.write) {  // the write's sum, computed by the I/O threads (Note [Transfer checksums])
      try {
        sum.crc = AsyncIo::checksum(sum.write);
      } catch (const Error& e) {
        return AsyncIo::failed(record + " cannot be read back: its last write failed (" +
                               e.what() + ")");
      }
      sum.write.reset();
    }
    expected = sum.crc;
  } else {
    expected = zeros_checksum(bytes);
  }
  auto check = [expected, record, wrote = written != sums_.end()](uint32_t found) -> std::string {
    if (found == expected) return "";
    char sums[96];
    std::snprintf(sums, sizeof sums, "CRC-32C 0x%08x read, 0x%08x %s", found, expected,
                  wrote ? "written by this run" : "expected of a record never written (zeros)");
    return record + " does not hold what this run " + (wrote ? "wrote" : "left") + " there (" +
           sums + "): its bytes changed on disk (silent corruption, or a write by something " +
           "else that kept the file's size and modification time); the offloaded state cannot " +
           "be trusted, so the run stops (its last checkpoint is the way back)";
  };
  return io_.read(fd_, buffer, bytes, offset, path_, std::move(check));
}

AsyncIo::Ticket SwapFile::write(const void* buffer, int64_t bytes, int64_t offset) {
  check_range(bytes, offset);
  sealed_ = false;
  if (!checksums_) return io_.write(fd_, buffer, bytes, offset, path_);
  // Records never overlap (a write over part of another would leave that one's sum wrong).
  auto next = sums_.upper_bound(offset);
  ZERO_INTERNAL_ASSERT(next == sums_.end() || next->first >= offset + bytes, "swap record of ",
                       bytes, " bytes at ", offset, " of '", path_, "' overlaps the one at ",
                       next == sums_.end() ? 0 : next->first);
  if (next != sums_.begin()) {
    auto before = std::prev(next);
    ZERO_INTERNAL_ASSERT(before->first == offset ? before->second.bytes == bytes
                                                 : before->first + before->second.bytes <= offset,
                         "swap record of ", bytes, " bytes at ", offset, " of '", path_,
                         "' overlaps the one at ", before->first);
  }
  AsyncIo::Ticket ticket = io_.write(fd_, buffer, bytes, offset, path_, /*checksum=*/true);
  sums_[offset] = RecordSum{bytes, 0, ticket};
  return ticket;
}

void SwapFile::seal() {
  struct stat st {};
  ZERO_CHECK(::fstat(fd_, &st) == 0, "cannot stat swap file '", path_, "': ", errno_text());
  device_ = st.st_dev;
  inode_ = st.st_ino;
  sealed_size_ = st.st_size;
  sealed_mtime_ns_ = mtime_ns(st);
  sealed_ = true;
}

void SwapFile::check_unchanged() const {
  ZERO_INTERNAL_ASSERT(sealed_, "swap file '", path_, "' read before its writes were sealed");
  struct stat by_path {};
  ZERO_CHECK(::stat(path_.c_str(), &by_path) == 0, "swap file '", path_,
             "' is gone (removed under the run): ", errno_text(),
             "; the offloaded state cannot be read");
  ZERO_CHECK(by_path.st_dev == device_ && by_path.st_ino == inode_, "swap file '", path_,
             "' was replaced under the run (another file now has its name); the offloaded ",
             "state cannot be read");
  struct stat st {};
  ZERO_CHECK(::fstat(fd_, &st) == 0, "cannot stat swap file '", path_, "': ", errno_text());
  ZERO_CHECK(st.st_size == sealed_size_, "swap file '", path_, "' has ", st.st_size,
             " bytes, but the run left ", sealed_size_,
             " (it was truncated or extended under the run); the offloaded state cannot be read");
  ZERO_CHECK(mtime_ns(st) == sealed_mtime_ns_, "swap file '", path_,
             "' was written by something other than this run since its last step (its ",
             "modification time changed); the offloaded state cannot be trusted");
}

}  // namespace zero
