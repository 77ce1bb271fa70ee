// What both parameter policies share (Note [Flat groups]): the trainable parameters collected
// once, the flat run of parameters whose gradients are reduced together, and the one pool of
// communication buffers.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "zero/shard.h"

namespace torch::nn {
class Module;
}

namespace zero {

// Note [Flat groups]
// ~~~~~~~~~~~~~~~~~~
// Every stage keeps parameters as views into flat buffers and reduces gradients a flat group
// at a time. A group is parameters at offsets in one flat buffer, the range of that buffer it
// covers, how many of its parameters still await their gradient in this backward, and (while
// its reduction is in flight) a pooled buffer its gradients are copied into. Stages 0-2 hold one
// buffer of every parameter, replicated, cut into groups of at most reduce_bucket_size elements
// (buckets: Note [Bucket order] in flat_engine.cpp); stage 3 holds one buffer per unit,
// partitioned, each a group (Note [Stage 3 units] in stage3_engine.cpp). The stage is the
// policy over this: where gradients live (the full buffer, or the owned shard of the shard
// state), how they are reduced (all-reduce or reduce-scatter), when (at the boundary or every
// micro-step) and how parameters are held (replicated, or gathered per unit just in time).

/// One trainable parameter, once: a parameter shared by several modules is the first one's.
struct TrainableParameter {
  std::string name;   // its path from the model ("transformer.h.0.attn.c_attn.weight")
  at::Tensor tensor;  // shares the module's TensorImpl: set_data on it changes the parameter
  int64_t numel = 0;
  int module = -1;    // the module that registers it first, an index into ModelParameters::modules
  int group = -1;     // the flat group holding it (set by the engine)
  int64_t offset = 0; // its first element in that group's flat buffer
};

/// The model's modules in pre-order and its trainable parameters in registration order.
struct ModelParameters {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules;
  std::vector<TrainableParameter> parameters;
  /// uses[m]: the parameters module m registers itself (shared ones included), in order.
  std::vector<std::vector<int>> uses;
};

/// The one parameter collector of every stage. Throws zero::Error (naming the parameter) when
/// one is not floating point, they are not all on one device, or (`require_some`) there is
/// none.
ModelParameters collect_trainable_parameters(const torch::nn::Module& model,
                                             bool require_some = true);

/// A flat run of parameters whose gradients are reduced together (Note [Flat groups]).
struct FlatGroup {
  std::vector<int> params;  // indices into the parameter list
  Range range;              // the elements of its flat buffer it covers
  int pending = 0;          // parameters whose gradient has not arrived in this backward
  // While its reduction is in flight: its gradients in the communication dtype, a view of the
  // pooled allocation `grad_pooled` (or of a parameter's own gradient, grad_pooled undefined).
  at::Tensor grad_buffer;
  at::Tensor grad_pooled;
};

/// Cuts a flat buffer holding parameters of `numels` back to back from offset 0 into groups
/// of at most `capacity` elements at parameter boundaries (a parameter larger than the
/// capacity is a group of its own), in order; the last group also covers the padding up to
/// `padded_numel`. Sets each group's params (indices into `numels`) and range. Pure.
std::vector<FlatGroup> cut_into_groups(const std::vector<int64_t>& numels, int64_t capacity,
                                       int64_t padded_numel);

// Communication buffers (gathered parameters, gradients in flight), reused across groups and
// steps like a caching allocator: a fresh buffer each step costs its page faults again (buffers
// this size are mmap'ed by glibc and unmapped on free). Clearing the cache after every backward
// made stage 3 1.2-1.3x stage 0's step on gpt2-mini at 2 ranks, keeping it 1.0x
// (docs/benchmarks.md). A request takes the smallest cached buffer that fits it and is at most
// twice its size (or at most kReuseSlack elements larger): a far larger buffer is not lent to a
// small request, whose use would make its own large request allocate a second one (at stage 3
// the embedding's gradient buffer, 25 MiB for gpt2-tiny, beside a block's). A request nothing
// cached fits replaces the largest cached one smaller than it, so the pool owns at most as
// many buffers of a dtype as were in use at once, plus far larger ones kept for their
// requests, each no larger than the largest request; the reduce bucket size and
// stage3_max_live_parameters bound both. Thread-safe: buffers come back from the
// communicator's progress thread.
// On a device with streams (CUDA) a buffer is put back as soon as the work using it has been
// enqueued, which may be on another stream (a device backend runs in_order tasks on its
// communication stream): put() records an event on the current stream, and acquire() makes
// its caller's current stream wait for it, so the next user's kernels run after the last
// one's. On the CPU, where work has finished when put() is called, there are no events.
class BufferPool {
 public:
  /// Elements a cached buffer may exceed a request by and still be lent to it, beside any
  /// buffer at most twice the request.
  static constexpr int64_t kReuseSlack = int64_t{1} << 20;

  /// The smallest cached buffer of `options`' dtype and device with at least `numel` elements
  /// (and not far more: see above), or a new one. Its contents are whatever was last written.
  at::Tensor acquire(int64_t numel, const at::TensorOptions& options);
  void put(at::Tensor buffer);

  /// `group`'s gradient buffer: `numel` zeroed elements (parameters without a gradient in this
  /// backward, and padding, contribute zeros) of `options` from the pool.
  void acquire_gradients(FlatGroup& group, int64_t numel, const at::TensorOptions& options);
  /// Back to the pool, once its reduction has read it.
  void release_gradients(FlatGroup& group);

 private:
  struct Cached {
    at::Tensor buffer;
    std::shared_ptr<c10::Event> last_use;  // recorded at put() on a device with streams
  };
  std::mutex mutex_;
  std::vector<Cached> free_;
};

}  // namespace zero
