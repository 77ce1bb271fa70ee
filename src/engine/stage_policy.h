// A ZeRO stage as a policy over the shared flat-group machinery (Note [Flat groups] in
// flat_group.h): the few decisions in which stages differ, made once from the config.
#pragma once

#include <cstdint>

#include "zero/config.h"

namespace zero {

/// The stage as a policy over flat groups (Note [Flat groups]): derived once from the
/// zero_optimization section by stage_policy; the engines read these fields, not the stage.
struct StagePolicy {
  enum class Gradients { kFullBuffer, kOwnedShard };     // where reduced gradients live
  enum class Reduction { kAllReduce, kReduceScatter };   // how a group's gradients are reduced
  enum class ReduceWhen { kBoundary, kEveryMicroStep };  // when they are reduced
  enum class Parameters { kReplicated, kPartitioned };   // how parameters are held

  int stage = 0;
  Gradients gradients = Gradients::kFullBuffer;
  Reduction reduction = Reduction::kAllReduce;
  ReduceWhen reduce_when = ReduceWhen::kBoundary;
  Parameters parameters = Parameters::kReplicated;
  /// The optimizer updates only this rank's shard, so parameters are all-gathered after a
  /// step (stages 1-3); stage 0 updates every element on every rank.
  bool updates_owned_shard = false;
  /// Elements per group when parameters are replicated (stages 0-2): reduce_bucket_size, or
  /// 1 at stage 2 without contiguous_gradients. Unused at stage 3, whose groups are its units.
  int64_t group_capacity = 1;
  /// Stage 2 without contiguous_gradients: a gradient alone in its group (and in the
  /// communication dtype) is reduced where autograd left it, not copied into a pooled buffer.
  bool reduce_lone_gradient_in_place = false;
};

/// The policy of `zero.stage` with its options. Pure; zero_optimization is already valid.
StagePolicy stage_policy(const ZeroOptimizationConfig& zero);

}  // namespace zero
