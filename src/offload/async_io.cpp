#include "offload/async_io.h"

#include <liburing.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

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
  Check check;  // reads: run on the data once every request succeeded
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
// The last request of a read with a check runs it before the waiters are woken (pending
// reaches 0 only after it), outside the lock: no other request of the transfer is left.
void AsyncIo::complete(const Request& r, const std::string& error) {
  Transfer& t = *r.transfer;
  std::unique_lock<std::mutex> lock(t.mutex);
  if (!error.empty() && t.error.empty()) t.error = describe(t) + ": " + error;
  if (t.pending == 1 && t.check && t.error.empty()) {
    lock.unlock();
    std::string wrong;
    try {
      wrong = t.check(t.data, t.bytes);
    } catch (const std::exception& e) {
      wrong = e.what();
    }
    lock.lock();
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
  return submit(fd, static_cast<char*>(buffer), bytes, offset, path, false, std::move(check));
}

AsyncIo::Ticket AsyncIo::write(int fd, const void* buffer, int64_t bytes, int64_t offset,
                               const std::string& path) {
  // The request only reads the buffer; io_uring's prep takes a non-const pointer for both.
  return submit(fd, const_cast<char*>(static_cast<const char*>(buffer)), bytes, offset, path,
                true, {});
}

AsyncIo::Ticket AsyncIo::submit(int fd, char* buffer, int64_t bytes, int64_t offset,
                                const std::string& path, bool is_write, Check check) {
  auto transfer = std::make_shared<Transfer>();
  transfer->is_write = is_write;
  transfer->path = path;
  transfer->bytes = bytes;
  transfer->offset = offset;
  transfer->data = buffer;
  transfer->check = std::move(check);
  if (bytes == 0) {
    if (transfer->check) transfer->error = transfer->check(buffer, 0);
    return transfer;
  }
  const int64_t block = config_.block_size;
  transfer->pending = (bytes + block - 1) / block;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int64_t done = 0; done < bytes; done += block) {
      queue_.push_back(Request{transfer, fd, buffer + done, std::min(block, bytes - done),
                               offset + done});
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
                                request->bytes - result, request->offset + result});
      } else {
        complete(*request, "");
      }
    }
    in_flight -= reaped;
  }
}

}  // namespace zero
