// Storage surgery for stage 3 (Note [Stage 3 units] in stage3_engine.cpp): a group's
// parameters are views of one flat tensor whose storage is attached to a gathered buffer or
// detached (0 bytes), and the partitioning that produces a group's shard.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "zero/comm.h"
#include "zero/shard.h"

namespace zero {

/// Points `full`'s storage at `buffer` (kept alive by the storage) with full's byte size.
void attach_storage(const at::Tensor& full, const at::Tensor& buffer);
/// Frees `full`'s storage (0 bytes); the views of it stay, unreadable until attached again
/// (with libtorch 2.x, reading one throws an error naming unit `owner`).
void detach_storage(const at::Tensor& full, const std::string& owner);

struct PartitionedGroup {
  ShardLayout layout;
  std::vector<int64_t> offsets;  // each parameter's offset in the flat buffer
  at::Tensor shard;              // this rank's shard (stored dtype), shard_numel elements
  at::Tensor full;               // padded flat buffer (compute dtype); the parameters are
                                 // views of it
  CommStats moved;               // what partitioning communicated (the broadcast)
};

/// Collective. Lays `params` out in one flat buffer of `compute_dtype` (in order), broadcasts
/// rank 0's values, keeps this rank's shard in `stored_dtype`, and makes every parameter a
/// view of the buffer (`moved` records the broadcast). When the two dtypes differ (Note
/// [Compute dtype] in zero/config.h) the buffer holds the stored values widened, exactly what
/// a later gather gives. With `keep_whole` false the buffer's storage is then detached,
/// freeing the full copy. The buffer is on `device` (the parameters move there), or where the
/// parameters are when it is nullopt.
PartitionedGroup partition_parameters(const std::vector<at::Tensor>& params,
                                      at::ScalarType stored_dtype, at::ScalarType compute_dtype,
                                      Communicator& comm, bool keep_whole,
                                      const std::string& owner,
                                      std::optional<at::Device> device = std::nullopt);

/// A unit partitioned while the model was built (zero::ShardedInit), waiting for
/// zero::initialize to adopt it.
struct PrepartitionedUnit {
  std::vector<at::Tensor> params;  // in the order of group.offsets
  PartitionedGroup group;
  at::ScalarType dtype;            // stored
  at::ScalarType compute_dtype;
  int world = 1;
  int64_t persistence_threshold = 0;
};

}  // namespace zero
