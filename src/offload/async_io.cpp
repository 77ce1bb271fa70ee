#include "offload/async_io.h"

#include <liburing.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/crc32c.h"
#include "zero/error.h"

namespace zero {

struct AsyncIo::Transfer {
  std::mutex mutex;
  std::condition_variable finished;
  int64_t pending = 0;  // requests not yet completed
  std::string error;    // the first failure
  bool is_write = false;
  std::string path;
  int64_t bytes = 0;
  int64_t offset = 0;
  char* data = nullptr;
  int64_t block = 0;                // bytes per request (the last may be shorter)
  bool checksum = false;            // Note [Transfer checksums]
  std::vector<uint32_t> piece_crc;  // per request, written by the thread completing it
  uint32_t crc = 0;                 // of the whole transfer, once every request succeeded
  Check check;                      // reads: run on `crc`
};

struct AsyncIo::Ring {
  io_uring ring{};
  bool initialized = false;
  ~Ring() {
    if (initialized) io_uring_queue_exit(&ring);
  }
};

namespace {

std::string describe(const AsyncIo::Transfer& t) {
  std::ostringstream text;
  text << (t.is_write ? "writing " : "reading ") << t.bytes << " bytes at offset " << t.offset
       << " of '" << t.path << "'";
  return text.str();
}

// What a transfer that returned no bytes means.
std::string nothing_transferred(bool is_write, int64_t offset) {
  return std::string(is_write ? "the device accepted no bytes" : "the file ends") +
         " at offset " + std::to_string(offset) +
         (is_write ? "" : " (it was truncated under the run)");
}

}  // namespace

// One request of `r`'s transfer finished, with `error` ("" when it succeeded).
// Note [Transfer checksums]: a request's piece is summed by the thread completing it, outside
// the lock; the last request joins the pieces and runs the check (pending reaches 0 only after
// it, so no waiter sees the transfer before; no other request of it is left).
void AsyncIo::complete(const Request& r, const std::string& error) {
  Transfer& t = *r.transfer;
  if (t.checksum && error.empty()) {
    const int64_t begin = r.piece * t.block;
    t.piece_crc[static_cast<size_t>(r.piece)] =
        crc32c(t.data + begin, static_cast<size_t>(std::min(t.block, t.bytes - begin)));
  }
  std::unique_lock<std::mutex> lock(t.mutex);
  if (!error.empty() && t.error.empty()) t.error = describe(t) + ": " + error;
  if (t.pending == 1 && t.checksum && t.error.empty()) {
    lock.unlock();
    uint32_t crc = t.piece_crc.empty() ? crc32c(nullptr, 0) : t.piece_crc[0];
    for (size_t i = 1; i < t.piece_crc.size(); ++i) {
      const int64_t begin = static_cast<int64_t>(i) * t.block;
      crc = crc32c_combine(crc, t.piece_crc[i], static_cast<uint64_t>(std::min(t.block, t.bytes - begin)));
    }
    std::string wrong;
    if (t.check) {
      try {
        wrong = t.check(crc);
      } catch (const std::exception& e) {
        wrong = e.what();
      }
    }
    lock.lock();
    t.crc = crc;
    if (!wrong.empty()) t.error = describe(t) + ": " + wrong;
  }
  if (--t.pending == 0) t.finished.notify_all();
}

AsyncIo::AsyncIo(const AioConfig& config, Engine engine) : config_(config) {
  ZERO_INTERNAL_ASSERT(config_.queue_depth >= 1 && config_.intra_op_parallelism >= 1 &&
                           config_.block_size >= 4096,
                       "aio config not validated");
  for (int64_t i = 0; engine == Engine::kAuto && i < config_.intra_op_parallelism; ++i) {
    auto ring = std::make_unique<Ring>();
    const int rc = io_uring_queue_init(static_cast<unsigned>(config_.queue_depth), &ring->ring, 0);
    if (rc != 0) {
      rings_.clear();
      static std::once_flag said;
      std::call_once(said, [&] {
        std::fprintf(stderr,
                     "zero: Linux io_uring is not available here (%s); swap files are read and "
                     "written with blocking calls on %lld I/O thread(s) "
                     "(aio.intra_op_parallelism)\n",
                     std::strerror(-rc), static_cast<long long>(config_.intra_op_parallelism));
      });
      break;
    }
    ring->initialized = true;
    rings_.push_back(std::move(ring));
  }
  for (int64_t i = 0; i < config_.intra_op_parallelism; ++i) {
    if (rings_.empty()) {
      threads_.emplace_back([this] { run_blocking(); });
    } else {
      threads_.emplace_back([this, i] { run(static_cast<int>(i)); });
    }
  }
}

AsyncIo::~AsyncIo() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  has_work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

AsyncIo::Ticket AsyncIo::read(int fd, void* buffer, int64_t bytes, int64_t offset,
                              const std::string& path, Check check) {
  const bool checksum = static_cast<bool>(check);
  return submit(fd, static_cast<char*>(buffer), bytes, offset, path, false, checksum,
                std::move(check));
}

AsyncIo::Ticket AsyncIo::write(int fd, const void* buffer, int64_t bytes, int64_t offset,
                               const std::string& path, bool checksum) {
  // The request only reads the buffer; io_uring's prep takes a non-const pointer for both.
  return submit(fd, const_cast<char*>(static_cast<const char*>(buffer)), bytes, offset, path,
                true, checksum, {});
}

AsyncIo::Ticket AsyncIo::submit(int fd, char* buffer, int64_t bytes, int64_t offset,
                                const std::string& path, bool is_write, bool checksum,
                                Check check) {
  auto transfer = std::make_shared<Transfer>();
  transfer->is_write = is_write;
  transfer->path = path;
  transfer->bytes = bytes;
  transfer->offset = offset;
  transfer->data = buffer;
  transfer->checksum = checksum;
  transfer->check = std::move(check);
  const int64_t block = config_.block_size;
  transfer->block = block;
  if (bytes == 0) {
    transfer->crc = crc32c(nullptr, 0);
    if (transfer->check) transfer->error = transfer->check(transfer->crc);
    return transfer;
  }
  transfer->pending = (bytes + block - 1) / block;
  if (checksum) transfer->piece_crc.assign(static_cast<size_t>(transfer->pending), 0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t done = 0; done < bytes; done += block) {
      queue_.push_back(Request{transfer, fd, buffer + done, std::min(block, bytes - done),
                               offset + done, done / block});
    }
  }
  has_work_.notify_all();
  return transfer;
}

AsyncIo::Ticket AsyncIo::failed(const std::string& error) {
  auto ticket = std::make_shared<Transfer>();
  ticket->error = error;
  return ticket;
}

void AsyncIo::wait(const Ticket& ticket) {
  if (!ticket) return;
  std::unique_lock<std::mutex> lock(ticket->mutex);
  ticket->finished.wait(lock, [&] { return ticket->pending == 0; });
  ZERO_CHECK(ticket->error.empty(), ticket->error);
}

uint32_t AsyncIo::checksum(const Ticket& ticket) {
  wait(ticket);
  ZERO_INTERNAL_ASSERT(ticket && ticket->checksum, "checksum of a transfer that computed none");
  std::lock_guard<std::mutex> lock(ticket->mutex);
  return ticket->crc;
}

bool AsyncIo::done(const Ticket& ticket) {
  if (!ticket) return true;
  std::lock_guard<std::mutex> lock(ticket->mutex);
  return ticket->pending == 0;
}

// One I/O thread without io_uring: one blocking request at a time, resumed after a short
// transfer (Note [Asynchronous file I/O]).
void AsyncIo::run_blocking() {
  while (true) {
    Request request;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      has_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing is left
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    std::string error;
    while (request.bytes > 0 && error.empty()) {
      const ssize_t done =
          request.transfer->is_write
              ? ::pwrite(request.fd, request.data, static_cast<size_t>(request.bytes),
                         static_cast<off_t>(request.offset))
              : ::pread(request.fd, request.data, static_cast<size_t>(request.bytes),
                        static_cast<off_t>(request.offset));
      if (done < 0) {
        if (errno == EINTR) continue;
        error = std::strerror(errno);
      } else if (done == 0) {
        error = nothing_transferred(request.transfer->is_write, request.offset);
      } else {
        request.data += done;
        request.bytes -= done;
        request.offset += done;
      }
    }
    complete(request, error);
  }
}

// One I/O thread: keeps up to queue_depth requests of the shared queue in flight on its ring
// (Note [Asynchronous file I/O]).
void AsyncIo::run(int thread_index) {
  io_uring* ring = &rings_[thread_index]->ring;
  const int64_t depth = config_.queue_depth;
  std::deque<Request> retry;  // remainders of short transfers, before new work
  int64_t in_flight = 0;
  while (true) {
    // 1. Fill the ring.
    int64_t prepared = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      if (in_flight == 0 && retry.empty()) {
        has_work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing is left
      }
      while (in_flight + prepared < depth && (!retry.empty() || !queue_.empty())) {
        std::deque<Request>& source = retry.empty() ? queue_ : retry;
        auto request = std::make_unique<Request>(std::move(source.front()));
        source.pop_front();
        io_uring_sqe* sqe = io_uring_get_sqe(ring);
        ZERO_INTERNAL_ASSERT(sqe != nullptr, "io_uring submission queue full below its depth");
        if (request->transfer->is_write) {
          io_uring_prep_write(sqe, request->fd, request->data,
                              static_cast<unsigned>(request->bytes),
                              static_cast<uint64_t>(request->offset));
        } else {
          io_uring_prep_read(sqe, request->fd, request->data,
                             static_cast<unsigned>(request->bytes),
                             static_cast<uint64_t>(request->offset));
        }
        io_uring_sqe_set_data(sqe, request.release());
        ++prepared;
        if (config_.single_submit) io_uring_submit(ring);
      }
    }
    if (prepared > 0 && !config_.single_submit) io_uring_submit(ring);
    in_flight += prepared;
    if (in_flight == 0) continue;

    // 2. Reap: one completion at least (overlap_events), or the whole batch.
    const int64_t wanted = config_.overlap_events ? 1 : in_flight;
    int64_t reaped = 0;
    while (reaped < wanted || (config_.overlap_events && reaped < in_flight)) {
      io_uring_cqe* cqe = nullptr;
      int rc = reaped < wanted ? io_uring_wait_cqe(ring, &cqe) : io_uring_peek_cqe(ring, &cqe);
      if (rc == -EAGAIN && reaped >= wanted) break;
      if (rc == -EINTR) continue;
      ZERO_INTERNAL_ASSERT(rc == 0 && cqe != nullptr, "io_uring wait failed: ",
                           std::strerror(-rc));
      std::unique_ptr<Request> request(static_cast<Request*>(io_uring_cqe_get_data(cqe)));
      const int result = cqe->res;
      io_uring_cqe_seen(ring, cqe);
      ++reaped;
      if (result < 0) {
        complete(*request, std::strerror(-result));
      } else if (result == 0 && request->bytes > 0) {
        complete(*request, nothing_transferred(request->transfer->is_write, request->offset));
      } else if (result < request->bytes) {
        // A short transfer: the rest goes first in the next round.
        retry.push_back(Request{request->transfer, request->fd, request->data + result,
                                request->bytes - result, request->offset + result,
                                request->piece});
      } else {
        complete(*request, "");
      }
    }
    in_flight -= reaped;
  }
}

}  // namespace zero
