#include "offload/transfer_queue.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "zero/error.h"

namespace zero {
namespace {

// A device with streams: one copy stream from the device's pool. Each copy waits (on the
// device) for the caller's current stream as it was when enqueued, runs non-blocking on the
// copy stream, and records an event that tickets resolve to.
class StreamTransferQueue final : public TransferQueue {
 public:
  explicit StreamTransferQueue(at::Device device)
      : device_(device),
        guard_(device.type()),
        stream_(guard_.getStreamFromGlobalPool(device, /*isHighPriority=*/false)) {}

  ~StreamTransferQueue() override {
    try {
      wait(last());
    } catch (...) {
      // A failed copy was reported to whoever waited on it; a destructor must not throw.
    }
  }

  Ticket copy(const at::Tensor& dst, const at::Tensor& src, Direction direction) override {
    ZERO_INTERNAL_ASSERT(dst.numel() == src.numel(), "transfer of ", src.numel(), " elements into ",
                         dst.numel());
    std::lock_guard<std::mutex> lock(mutex_);
    prune();
    c10::Event producer(device_.type());
    producer.record(guard_.getStream(device_));
    producer.block(stream_);
    // Timing events (BACKEND_DEFAULT) around the copy: its device time, for stats().
    Pending pending{++last_, c10::Event(device_.type(), c10::EventFlag::BACKEND_DEFAULT),
                    c10::Event(device_.type(), c10::EventFlag::BACKEND_DEFAULT), dst, src,
                    direction, static_cast<int64_t>(src.nbytes())};
    pending.started.record(stream_);
    {
      const c10::StreamGuard on_copy_stream(stream_);
      dst.copy_(src, /*non_blocking=*/true);
    }
    pending.done.record(stream_);
    pending_.push_back(std::move(pending));
    return last_;
  }

  void wait(Ticket ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Pending& p : pending_) {
      if (p.ticket >= ticket) {
        p.done.synchronize();  // in order: the ticket's event covers everything before it
        break;
      }
    }
    while (!pending_.empty() && pending_.front().ticket <= ticket) retire_front();
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void order_current_stream_after(Ticket ticket) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Pending& p : pending_) {
      if (p.ticket >= ticket) {
        p.done.block(guard_.getStream(device_));
        return;
      }
    }
  }

  at::Device device() const override { return device_; }
  Ticket last() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

  at::Tensor host_buffer(int64_t numel, at::ScalarType dtype, bool pinned) const override {
    return at::zeros({numel}, at::TensorOptions().dtype(dtype).pinned_memory(pinned));
  }

 private:
  struct Pending {
    Ticket ticket;
    c10::Event started, done;
    at::Tensor dst, src;  // alive until the copy has run
    Direction direction;
    int64_t bytes;
  };

  // Counts the finished copy at the front and drops it (its tensors may be freed now).
  void retire_front() {
    const Pending& p = pending_.front();
    const double seconds = p.started.elapsedTime(p.done) / 1e3;
    if (p.direction == Direction::kDown) {
      stats_.down_bytes += p.bytes;
      stats_.down_seconds += seconds;
    } else {
      stats_.up_bytes += p.bytes;
      stats_.up_seconds += seconds;
    }
    pending_.pop_front();
  }
  // Drops the finished copies at the front.
  void prune() {
    while (!pending_.empty() && pending_.front().done.query()) retire_front();
  }

  const at::Device device_;
  const c10::impl::VirtualGuardImpl guard_;
  const c10::Stream stream_;
  mutable std::mutex mutex_;
  std::deque<Pending> pending_;
  Ticket last_ = 0;
  Stats stats_;
};

// The CPU stand-in: the copies run in order on a thread of their own.
class ThreadTransferQueue final : public TransferQueue {
 public:
  ThreadTransferQueue() : thread_([this] { run(); }) {}

  ~ThreadTransferQueue() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  Ticket copy(const at::Tensor& dst, const at::Tensor& src, Direction direction) override {
    ZERO_INTERNAL_ASSERT(dst.numel() == src.numel(), "transfer of ", src.numel(), " elements into ",
                         dst.numel());
    Ticket ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket = ++last_;
      queue_.push_back({dst, src, direction});
    }
    changed_.notify_all();
    return ticket;
  }

  void wait(Ticket ticket) override {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= ticket || failure_; });
    if (failure_) std::rethrow_exception(failure_);
  }

  void order_current_stream_after(Ticket ticket) override { wait(ticket); }

  at::Device device() const override { return at::Device(at::kCPU); }
  Ticket last() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return last_;
  }

  Stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  at::Tensor host_buffer(int64_t numel, at::ScalarType dtype, bool /*pinned*/) const override {
    return at::zeros({numel}, at::TensorOptions().dtype(dtype));
  }

 private:
  struct Copy {
    at::Tensor dst, src;
    Direction direction = Direction::kDown;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to copy
      Copy next = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      const auto started = std::chrono::steady_clock::now();
      try {
        next.dst.copy_(next.src);
      } catch (...) {
        failure = std::current_exception();
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      const int64_t bytes = static_cast<int64_t>(next.src.nbytes());
      const Direction direction = next.direction;
      next = Copy{};  // the tensors go before the copy is reported done
      lock.lock();
      if (failure && !failure_) failure_ = failure;
      (direction == Direction::kDown ? stats_.down_bytes : stats_.up_bytes) += bytes;
      (direction == Direction::kDown ? stats_.down_seconds : stats_.up_seconds) += seconds;
      ++done_;
      changed_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Copy> queue_;
  Ticket last_ = 0;
  Ticket done_ = 0;
  std::exception_ptr failure_;
  Stats stats_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace

std::shared_ptr<TransferQueue> make_transfer_queue(at::Device device) {
  if (device.is_cpu()) return std::make_shared<ThreadTransferQueue>();
  return std::make_shared<StreamTransferQueue>(device);
}

}  // namespace zero
