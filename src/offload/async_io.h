// Asynchronous reads and writes of swap files with Linux io_uring (liburing), driven by the
// `aio` section of the config. See Note [Asynchronous file I/O].
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zero/config.h"

namespace zero {

// Note [Asynchronous file I/O]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A transfer (one read or write of a contiguous byte range) is cut into requests of
// aio.block_size bytes. aio.intra_op_parallelism I/O threads each own an io_uring of
// aio.queue_depth entries and take requests from one shared queue, so a transfer's requests
// are in flight on every thread at once. A thread submits its requests in one batch
// (aio.single_submit: each on its own) and, with aio.overlap_events, refills its queue as each
// request finishes; without, it waits for the whole batch first. A short transfer (the kernel
// may return fewer bytes) is resubmitted for the rest; a read that meets the end of the file is
// an error (the file was truncated), as is any errno: the transfer's waiter gets a zero::Error
// naming the operation, the path, the offset and the byte counts. Nothing blocks the caller
// except wait(): the optimizer computes on one tile while the threads move the others
// (Note [NVMe offload], src/offload/swap_file.h).
//
// liburing, not libaio (DeepSpeed's choice): it is Debian's well-kept interface to the kernel's
// current asynchronous I/O, works with and without O_DIRECT, and needs no per-request syscall.
// Where io_uring cannot be set up (kernels without it; container seccomp profiles, Docker's
// among them, forbid it), the same threads do blocking pread/pwrite instead, one request at a
// time each, and zero says so once: still asynchronous to the caller, with
// aio.intra_op_parallelism requests in flight; queue_depth, single_submit and overlap_events
// then have no effect.
//
// Note [Transfer checksums]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// A transfer asked for its CRC-32C gets it from its requests: the I/O thread that completes a
// request sums that request's bytes (a read's as they landed, a write's as they went out: the
// buffer does not change until wait()), while the transfer's other requests are still in
// flight, and the thread that completes the last request joins the pieces in order
// (crc32c_combine) and runs the read's check, before any waiter wakes. So the sums cost the
// I/O threads time the disk would otherwise have them wait, not the caller's.

class AsyncIo {
 public:
  struct Transfer;
  /// A submitted transfer; wait on it with wait().
  using Ticket = std::shared_ptr<Transfer>;

  /// How requests reach the kernel: io_uring where it can be set up, else blocking calls on
  /// the I/O threads (kAuto); kBlocking forces the latter (tests).
  enum class Engine { kAuto, kBlocking };

  /// Starts the I/O threads.
  explicit AsyncIo(const AioConfig& config, Engine engine = Engine::kAuto);
  /// Waits for what is in flight, then stops the threads. Never throws.
  ~AsyncIo();
  AsyncIo(const AsyncIo&) = delete;
  AsyncIo& operator=(const AsyncIo&) = delete;

  /// A check of what a read brought in, given its CRC-32C: "" when it is right, else what is
  /// wrong (the transfer's error). See Note [Transfer checksums].
  using Check = std::function<std::string(uint32_t crc32c)>;

  /// Reads `bytes` at `offset` of `fd` into `buffer`. `path` names the file in errors.
  /// The buffer must stay valid until wait() returns. With a `check`, the bytes' CRC-32C is
  /// computed and the check decides whether the read succeeded.
  Ticket read(int fd, void* buffer, int64_t bytes, int64_t offset, const std::string& path,
              Check check = {});
  /// Writes `bytes` from `buffer` at `offset` of `fd`; with `checksum`, also computes the
  /// bytes' CRC-32C (checksum()). The buffer must not change until wait() returns.
  Ticket write(int fd, const void* buffer, int64_t bytes, int64_t offset,
               const std::string& path, bool checksum = false);
  /// The CRC-32C of a finished, successful transfer that computed one (a checked read, a
  /// write with `checksum`); throws the transfer's error when it failed.
  static uint32_t checksum(const Ticket& ticket);

  /// A finished transfer that failed with `error` (a check that failed before the transfer
  /// could start, reported to its waiter like a failed transfer).
  static Ticket failed(const std::string& error);
  /// Blocks until the transfer finished; throws zero::Error if any part of it failed. A null
  /// ticket is a finished one.
  static void wait(const Ticket& ticket);
  /// Whether the transfer finished (successfully or not); wait() then does not block.
  static bool done(const Ticket& ticket);

  const AioConfig& config() const { return config_; }
  /// Whether requests go through io_uring (false: blocking calls on the I/O threads).
  bool uses_io_uring() const { return !rings_.empty(); }

 private:
  struct Request {
    Ticket transfer;
    int fd;
    char* data;
    int64_t bytes;
    int64_t offset;
    int64_t piece;  // which of the transfer's requests (data/bytes/offset advance on retries)
  };

  Ticket submit(int fd, char* buffer, int64_t bytes, int64_t offset, const std::string& path,
                bool is_write, bool checksum, Check check);
  static void complete(const Request& request, const std::string& error);
  void run(int thread_index);
  void run_blocking();

  AioConfig config_;
  std::mutex mutex_;
  std::condition_variable has_work_;
  std::deque<Request> queue_;
  bool stopping_ = false;
  struct Ring;  // one io_uring, owned by one thread
  std::vector<std::unique_ptr<Ring>> rings_;
  std::vector<std::thread> threads_;
};

}  // namespace zero
