// Copies between host memory and the model's device, in order, off the compute stream: what
// ZeRO-Offload of a device model moves (gradients down, updated parameters up). See Note
// [Offload of a device model] in src/engine/host_offload.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

namespace zero {

/// One queue of copies, run in the order they were enqueued. A ticket names a point in the
/// queue: waiting for it waits for that copy and every copy before it.
///
/// On a device with streams (CUDA) the copies run on a stream of their own (the copy stream),
/// each after the work already enqueued on the caller's current stream when it was enqueued
/// (the producer: a reduction, a kernel), without blocking the host; host tensors should be
/// pinned for the copies to be asynchronous. The queue keeps each copy's tensors alive until
/// it has finished, so a caller may drop its references at once.
///
/// On CPU ranks there is no device: the CPU stand-in runs the same protocol with the copies on
/// a thread of its own, so the engines' offload pipeline (and every ordering it relies on) is
/// exercised by tests on machines without a GPU.
class TransferQueue {
 public:
  using Ticket = int64_t;  // 0: nothing (already complete)
  /// Which way a copy goes: down to the host, up to the device (for the statistics; on the CPU
  /// stand-in both ends are host memory).
  enum class Direction { kDown, kUp };
  /// What the queue has moved: bytes, and the time its copies took on the copy stream (device
  /// time between each copy's start and end events; the copy thread's time on the stand-in),
  /// for the copies known to have finished.
  struct Stats {
    int64_t down_bytes = 0;
    int64_t up_bytes = 0;
    double down_seconds = 0.0;
    double up_seconds = 0.0;
  };

  virtual ~TransferQueue() = default;

  /// Enqueues dst.copy_(src) (same numel; dtypes may differ). Thread-safe.
  virtual Ticket copy(const at::Tensor& dst, const at::Tensor& src, Direction direction) = 0;
  /// The host waits until copies up to `ticket` have finished; rethrows a copy's failure.
  virtual void wait(Ticket ticket) = 0;
  /// Work enqueued on the caller's current stream from now on runs after copies up to
  /// `ticket` (on the CPU stand-in: the host waits).
  virtual void order_current_stream_after(Ticket ticket) = 0;
  /// The newest ticket handed out (0 before the first copy).
  virtual Ticket last() const = 0;
  /// The device the copies go to and from (the CPU for the stand-in).
  virtual at::Device device() const = 0;
  virtual Stats stats() const = 0;

  /// A pinned host buffer when the device has a pinned-memory allocator and `pinned` is
  /// asked for, else ordinary host memory. Zero-filled.
  virtual at::Tensor host_buffer(int64_t numel, at::ScalarType dtype, bool pinned) const = 0;
};

/// The queue for `device`: its copy stream when it is a device with streams (CUDA), else the
/// CPU stand-in (a copy thread).
std::shared_ptr<TransferQueue> make_transfer_queue(at::Device device);

}  // namespace zero
