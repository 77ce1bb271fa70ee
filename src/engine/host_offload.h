// ZeRO-Offload of a model that computes on a device: the gradient pipeline from the device to
// the host, where the optimizer state lives. See Note [Offload of a device model].
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/transfer_queue.h"

namespace zero {

// Note [Offload of a device model]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// With offload_optimizer "cpu" (or "nvme") and parameters on a device (CUDA), the shard state
// (Note [Shard state]) lives on the host: the fp32 master weights and moments (in memory or in
// swap files), the gradient shard (pinned), and a host copy of the parameter-dtype shard that
// the optimizer writes (ParamStore's device copy, src/state/param_store.h). The device keeps
// only the parameters (whole at stages 1-2, the shards and gathered units at stage 3) and the
// gradient buckets in flight. All traffic between the two goes through one TransferQueue (the
// copy stream), in order:
//   - down: when a bucket (stages 1-2) or a unit's group (stage 3) has been reduced, this
//     rank's part of it is copied to the host on the copy stream, ordered after the reduction
//     on the device, without blocking the host; the bucket's buffer is reused only after the
//     copy (the reducing stream waits for it on the device). A worker thread then adds it into
//     the host gradient shard (or converts it there) as backward goes on: the host waits only
//     for the copies, never for the compute.
//   - up: the optimizer steps the host copy of the parameters tile by tile, and each tile is
//     copied to the device as soon as it is written, while the next one is computed; a pass
//     ends by ordering the device's current stream after its last copy, so the parameters'
//     next use (the all-gather of stages 1-2, stage 3's gathers, the forward) sees them.
// One queue in one order is what makes it safe without host synchronisation: a step's reads of
// the host gradient wait for the down copies before them, and the next step's gradient copies
// come after this step's parameter copies.
//
// With offload_param too (stage 3) the host store is the only copy of the shards: the device
// keeps none, and each gather copies its shard up first (Stage3Engine::all_gather_group).
//
// When the update does not depend on the global gradient norm (no gradient_clipping, no fp16
// loss scaling, whose overflow check needs it) the optimizer also steps each piece's elements
// as soon as they have arrived on the boundary micro-step, overlapped with the rest of backward
// (DeepSpeed's CPU Adam steps after backward); the elements' updates are independent, so the
// result is bitwise that of one step after backward. With clipping the step waits for the norm.
//
// On CPU ranks the same pipeline runs when asked for (ZERO_EMULATE_DEVICE_OFFLOAD, a testing aid:
// the engine's tensors play the device, the transfer queue is a copy thread), so CI runs every
// path of it bit for bit against in-memory training.

/// Staging buffers of a HostGradientPipeline: enough that the copy of the next piece overlaps
/// the addition of the one before, and a few reductions can complete while the worker is
/// behind (the memory planner counts them).
constexpr int kHostGradientStagingBuffers = 3;

/// The down half of Note [Offload of a device model]: a device piece of a reduced gradient
/// into the host gradient shard, through the transfer queue and a worker thread.
class HostGradientPipeline {
 public:
  /// `host_gradient`: the gradient shard on the host (pinned for asynchronous copies).
  /// `largest_piece`: the most elements one gradient() call brings; `piece_dtype`: their dtype
  /// on the device (the communication dtype), `pinned`: pinned staging buffers.
  HostGradientPipeline(std::shared_ptr<TransferQueue> queue, at::Tensor host_gradient,
                       int64_t largest_piece, at::ScalarType piece_dtype, bool pinned);
  /// Waits for what is in flight. Never throws.
  ~HostGradientPipeline();
  HostGradientPipeline(const HostGradientPipeline&) = delete;
  HostGradientPipeline& operator=(const HostGradientPipeline&) = delete;

  /// Called after each piece has been put into the host gradient, on the worker thread, in
  /// the order the pieces were given: `begin`, `end` are shard-space offsets.
  using ArrivalHook = std::function<void(int64_t begin, int64_t end)>;
  /// Set or cleared (empty) between backwards, never while pieces are in flight.
  void set_arrival_hook(ArrivalHook hook);

  /// `piece` (on the device, reduced) into host gradient elements [offset, offset + numel):
  /// added when `accumulate`, else copied. Returns once the copy is enqueued; the caller's
  /// current stream is ordered after it, so `piece`'s memory may be reused by work enqueued
  /// after this call. Thread-safe; pieces are processed in call order. After a failure (until
  /// drain() has reported it) pieces are dropped.
  void gradient(const at::Tensor& piece, int64_t offset, bool accumulate);
  /// Waits until every piece given so far is in the host gradient and its hook has run;
  /// rethrows the first failure (of a copy, an addition or a hook) once.
  void drain();

  /// The staging buffers made so far: none until a piece needs one (accumulated or converted).
  int64_t staging_bytes();
  /// The worker's busy time so far: putting pieces into the host gradient (waiting for their
  /// copies included), and running the arrival hook (the overlapped step).
  struct Times {
    double add_seconds = 0.0;
    double hook_seconds = 0.0;
  };
  Times times();

 private:
  struct Job {
    TransferQueue::Ticket ticket;
    int slot;  // staging buffer, -1: copied straight into the host gradient
    int64_t offset;
    int64_t numel;
    bool accumulate;
  };
  void run();
  void process(const Job& job);

  std::shared_ptr<TransferQueue> queue_;
  at::Tensor host_gradient_;
  const int64_t largest_piece_;
  const at::ScalarType piece_dtype_;
  const bool pinned_;
  std::vector<at::Tensor> staging_;  // kHostGradientStagingBuffers, made on first need
  std::vector<char> slot_free_;
  ArrivalHook hook_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  int64_t given_ = 0;  // pieces given, and processed
  int64_t processed_ = 0;
  Times times_;
  std::exception_ptr failure_;
  bool stopping_ = false;
  std::thread worker_;  // last: started once everything it uses exists
};

}  // namespace zero
