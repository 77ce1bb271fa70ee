// Swap files of NVMe offload and the aligned host buffers they are read into. See
// Note [NVMe offload].
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <unordered_map>

#include "offload/async_io.h"

namespace zero {

// Note [NVMe offload]
// ~~~~~~~~~~~~~~~~~~~
// With offload device "nvme" (ZeRO-Infinity) a rank keeps state in files instead of memory:
//   - offload_optimizer: the fp32 master weights (for 16-bit parameters; fp32 parameters are
//     their own master and stay in memory) and the optimizer's moments of its shard space, as
//     one record per tile of sub_group_size elements (src/state/state_store.cpp). The optimizer
//     step streams the records through offload_optimizer.buffer_count staging buffers: tile
//     i+1 is read and tile i-1 written while tile i is stepped by the unchanged optimizer loop,
//     so results are bitwise those of the in-memory run.
// Files live in one directory per job and rank, nvme_path/zero-<job>/rank<r>/ (SwapDirectory,
// src/offload/swap_directory.h): made at start-up, removed at a clean exit, and found and
// removed at the next start when the run that made them was killed.
// Every transfer is a multiple of kSwapAlignment bytes at an offset that is one, into a buffer
// aligned to it, so the files can be opened with O_DIRECT and bypass the page cache, which on a
// machine short of memory (the reason to offload) would otherwise hold a second copy of what
// streams through. A file system that refuses O_DIRECT (tmpfs) gets buffered I/O and one line
// saying so. A file's blocks are reserved when it is made (fallocate), so a full disk is an
// error at start-up, naming the path and the bytes, and not in the middle of a step.
// Nothing else may write the files: each is sealed (inode, size, modification time) after the
// engine's last write and checked before the next read, so a file truncated, replaced or
// changed under the run is an error and not silently read. That cannot see bytes that change
// while size and time stay (a disk's silent corruption, an overwrite that restores the time),
// so every record also has a checksum; see Note [Swap record checksums].
//
// Note [Swap record checksums]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A record is what one write() puts at one offset (an optimizer tile, a parameter segment).
// Its CRC-32C (src/common/crc32c.h: SSE4.2's crc32 instruction, three chains at once) is
// computed by the I/O threads as the write goes out (Note [Transfer checksums] in
// async_io.h) and kept in memory with the record's offset and length; a record never written
// holds the zeros its reserved blocks read as. read() of a record has the I/O threads sum
// what arrives and check it against that value (AsyncIo::Check): a mismatch fails the read's
// waiter with a zero::Error naming the file, the record (the caller's description: tile or
// segment, with its elements), the offset, the length and both checksums, and the engines
// turn a failed read into an error on every rank as they do any other (the run stops; its
// last checkpoint is the way back). The sums stay in memory, not in
// the file: swap files live and die with one run, so nothing needs to read them back in
// another process, and a sum kept beside the record could be damaged (or rewritten) with it.
// A read must be of exactly a record that was written (or of one never written).

/// Alignment of swap-file offsets, transfer sizes and buffers: the largest logical block size
/// of the devices O_DIRECT is used on.
constexpr int64_t kSwapAlignment = 4096;

inline int64_t align_up(int64_t bytes) {
  return (bytes + kSwapAlignment - 1) / kSwapAlignment * kSwapAlignment;
}

/// Host memory aligned to kSwapAlignment, kept for the life of the buffer (Note [NVMe
/// offload]: staging buffers are reused every step, never returned to the allocator).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  char* data() const { return data_; }
  int64_t bytes() const { return bytes_; }

 private:
  char* data_ = nullptr;
  int64_t bytes_ = 0;
  bool counted_ = false;  // in host_memory_stats (common/host_accounting.h)
};

class SwapFile {
 public:
  /// Creates `path` (it must not exist) with `bytes` reserved on its file system. Throws
  /// zero::Error naming the path and the bytes when it cannot (a full disk included).
  SwapFile(std::string path, int64_t bytes, AsyncIo& io);
  /// Closes and removes the file. Never throws.
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  /// Asynchronous transfers of aligned sizes at aligned offsets inside the file, a record
  /// each (Note [Swap record checksums]). The buffer of a write must not change until the
  /// write is waited for. A read's waiter fails when the bytes are not what was written;
  /// `record` names the record in that error ("optimizer tile 3 (elements [0, 4096))").
  AsyncIo::Ticket read(void* buffer, int64_t bytes, int64_t offset, const std::string& record);
  AsyncIo::Ticket write(const void* buffer, int64_t bytes, int64_t offset);

  /// After the engine's writes have finished: records what the file is now.
  void seal();
  /// Before reading what was sealed: throws zero::Error when the file was removed, replaced,
  /// truncated or written since.
  void check_unchanged() const;

  const std::string& path() const { return path_; }
  int64_t bytes() const { return bytes_; }
  /// Whether the file bypasses the page cache (O_DIRECT).
  bool direct() const { return direct_; }

 private:
  void check_range(int64_t bytes, int64_t offset) const;

  // The CRC-32C of `bytes` zeros: what a record never written holds.
  uint32_t zeros_checksum(int64_t bytes);

  struct RecordSum {
    int64_t bytes;
    uint32_t crc;           // known once `write` is reset
    AsyncIo::Ticket write;  // the write whose I/O threads compute `crc`
  };

  std::string path_;
  int64_t bytes_;
  AsyncIo& io_;
  bool checksums_;  // env::swap_checksums(): off only to measure their cost
  std::map<int64_t, RecordSum> sums_;                 // by offset: what write() put there
  std::unordered_map<int64_t, uint32_t> zero_sums_;   // by length
  int fd_ = -1;
  bool direct_ = false;
  // What seal() recorded.
  bool sealed_ = false;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  int64_t sealed_size_ = 0;
  int64_t sealed_mtime_ns_ = 0;
};

}  // namespace zero
