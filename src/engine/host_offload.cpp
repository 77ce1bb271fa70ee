#include "engine/host_offload.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>

#include <chrono>
#include <optional>
#include <utility>

#include "zero/error.h"

namespace zero {

HostGradientPipeline::HostGradientPipeline(std::shared_ptr<TransferQueue> queue,
                                           at::Tensor host_gradient, int64_t largest_piece,
                                           at::ScalarType piece_dtype, bool pinned)
    : queue_(std::move(queue)),
      host_gradient_(std::move(host_gradient)),
      largest_piece_(largest_piece),
      piece_dtype_(piece_dtype),
      pinned_(pinned) {
  ZERO_INTERNAL_ASSERT(host_gradient_.defined() && host_gradient_.device().is_cpu(),
                       "the offloaded gradient shard must be on the host");
  worker_ = std::thread([this] { run(); });
}

HostGradientPipeline::~HostGradientPipeline() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void HostGradientPipeline::set_arrival_hook(ArrivalHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  ZERO_INTERNAL_ASSERT(processed_ == given_, "arrival hook changed with gradients in flight");
  hook_ = std::move(hook);
}

int64_t HostGradientPipeline::staging_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t bytes = 0;
  for (const at::Tensor& buffer : staging_) bytes += buffer.nbytes();
  return bytes;
}

void HostGradientPipeline::gradient(const at::Tensor& piece, int64_t offset, bool accumulate) {
  const int64_t numel = piece.numel();
  ZERO_INTERNAL_ASSERT(offset >= 0 && offset + numel <= host_gradient_.numel(), "gradient piece [",
                       offset, ", ", offset + numel, ") outside the host shard of ",
                       host_gradient_.numel());
  const at::Tensor target = host_gradient_.narrow(0, offset, numel);
  const bool direct = !accumulate && piece.scalar_type() == host_gradient_.scalar_type();
  std::unique_lock<std::mutex> lock(mutex_);
  int slot = -1;
  if (!direct) {
    // Made on first need: pieces copied straight into the host gradient (no accumulation, the
    // same dtype) never need them.
    if (staging_.empty()) {
      for (int i = 0; i < kHostGradientStagingBuffers; ++i) {
        staging_.push_back(queue_->host_buffer(largest_piece_, piece_dtype_, pinned_));
        slot_free_.push_back(1);
      }
    }
    ZERO_INTERNAL_ASSERT(numel <= largest_piece_ && piece.scalar_type() == piece_dtype_,
                         "gradient piece of ", numel, " ", piece.scalar_type(),
                         " for staging buffers of ", largest_piece_, " ", piece_dtype_);
    changed_.wait(lock, [&] {
      for (size_t i = 0; i < slot_free_.size(); ++i) {
        if (slot_free_[i]) return true;
      }
      return failure_ != nullptr;
    });
    if (failure_) return;  // the step is lost; drain() reports why
    for (size_t i = 0; i < slot_free_.size() && slot < 0; ++i) {
      if (slot_free_[i]) slot = static_cast<int>(i);
    }
    slot_free_[slot] = 0;
  }
  const at::Tensor destination = slot < 0 ? target : staging_[slot].narrow(0, 0, numel);
  const TransferQueue::Ticket ticket =
      queue_->copy(destination, piece.reshape({-1}), TransferQueue::Direction::kDown);
  // The piece's buffer is reused by work enqueued after this call: it runs after the copy.
  queue_->order_current_stream_after(ticket);
  jobs_.push_back({ticket, slot, offset, numel, accumulate});
  ++given_;
  lock.unlock();
  changed_.notify_all();
}

void HostGradientPipeline::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return processed_ == given_; });
  if (failure_) {
    std::exception_ptr failure = std::exchange(failure_, nullptr);
    std::rethrow_exception(failure);
  }
}

HostGradientPipeline::Times HostGradientPipeline::times() {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_;
}

void HostGradientPipeline::process(const Job& job) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  queue_->wait(job.ticket);
  if (job.slot >= 0) {
    const at::Tensor staged = staging_[job.slot].narrow(0, 0, job.numel);
    at::Tensor target = host_gradient_.narrow(0, job.offset, job.numel);
    if (job.accumulate) {
      target.add_(staged);
    } else {
      target.copy_(staged);
    }
  }
  const auto added = Clock::now();
  if (hook_) hook_(job.offset, job.offset + job.numel);
  const auto hooked = Clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  times_.add_seconds += std::chrono::duration<double>(added - started).count();
  times_.hook_seconds += std::chrono::duration<double>(hooked - added).count();
}

void HostGradientPipeline::run() {
  // This thread's CUDA calls (waiting for copies) on the model's device: a fresh thread's
  // current device is GPU 0, and its first call would make a context there on every rank.
  std::optional<c10::DeviceGuard> on_device;
  if (!queue_->device().is_cpu()) on_device.emplace(queue_->device());
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    const Job job = jobs_.front();
    jobs_.pop_front();
    const bool skip = failure_ != nullptr;  // after a failure the step is lost anyway
    lock.unlock();
    std::exception_ptr failure;
    if (!skip) {
      try {
        process(job);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    lock.lock();
    if (job.slot >= 0) slot_free_[job.slot] = 1;
    if (failure && !failure_) failure_ = failure;
    ++processed_;
    changed_.notify_all();
  }
}

}  // namespace zero
