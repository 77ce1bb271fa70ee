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

  /// A check of the bytes a read brought in: "" when they are right, else what is wrong (the
  /// transfer's error). Run once, by the I/O thread that finishes the read, after every
  /// request of it succeeded, so it costs the waiter nothing while other work goes on.
  using Check = std::function<std::string(const char* data, int64_t bytes)>;

  /// Reads `bytes` at `offset` of `fd` into `buffer`. `path` names the file in errors.
  /// The buffer must stay valid until wait() returns.
  Ticket read(int fd, void* buffer, int64_t bytes, int64_t offset, const std::string& path,
              Check check = {});
  /// Writes `bytes` from `buffer` at `offset` of `fd`.
  Ticket write(int fd, const void* buffer, int64_t bytes, int64_t offset,
               const std::string& path);

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
  };

  Ticket submit(int fd, char* buffer, int64_t bytes, int64_t offset, const std::string& path,
                bool is_write, Check check);
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
