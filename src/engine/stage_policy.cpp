#include "engine/stage_policy.h"

#include <algorithm>

#include "zero/error.h"

namespace zero {

StagePolicy stage_policy(const ZeroOptimizationConfig& zero) {
  ZERO_INTERNAL_ASSERT(zero.stage >= 0 && zero.stage <= 3, "stage ", zero.stage);
  StagePolicy policy;
  policy.stage = zero.stage;
  policy.gradients = zero.stage >= 2 ? StagePolicy::Gradients::kOwnedShard
                                     : StagePolicy::Gradients::kFullBuffer;
  // Stage 0 needs every gradient on every rank; reduce_scatter = false all-reduces and keeps
  // the owned part (DeepSpeed's option).
  policy.reduction = zero.stage == 0 || !zero.reduce_scatter ? StagePolicy::Reduction::kAllReduce
                                                             : StagePolicy::Reduction::kReduceScatter;
  // A full gradient buffer accumulates micro-steps locally; a shard must take each one's
  // reduced gradients, since the full gradient is not kept.
  policy.reduce_when = zero.stage >= 2 ? StagePolicy::ReduceWhen::kEveryMicroStep
                                       : StagePolicy::ReduceWhen::kBoundary;
  policy.parameters = zero.stage == 3 ? StagePolicy::Parameters::kPartitioned
                                      : StagePolicy::Parameters::kReplicated;
  policy.updates_owned_shard = zero.stage >= 1;
  policy.reduce_lone_gradient_in_place = zero.stage == 2 && !zero.contiguous_gradients;
  policy.group_capacity = policy.reduce_lone_gradient_in_place
                              ? 1
                              : std::max<int64_t>(1, zero.reduce_bucket_size);
  return policy;
}

}  // namespace zero
