// The optimizer of the owned shard: Adam/AdamW/SGD over one flat fp32 master tensor, in one
// fused, parallel loop that reads the (possibly 16-bit, still summed and scaled) gradient,
// applies the unscale/clip/average multiplier, updates the fp32 master weights and the
// optimizer state, and writes the rounded parameter copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "zero/config.h"

namespace zero {

class ShardOptimizer {
 public:
  /// `numel`: elements of the owned shard (padding included: padded elements stay zero).
  ShardOptimizer(const OptimizerConfig& config, int64_t numel);

  /// Starts one optimizer step: advances the step count (Adam's bias correction, SGD's first
  /// step). Then update() covers the shard, in one range or in tiles.
  void begin_step() { ++step_count_; }

  /// The current step on elements [begin, end) of the shard. `master`: fp32 [numel], updated in
  /// place. `grad`: fp32/bf16/fp16 [numel]; the gradient used is grad * grad_multiplier.
  /// `param_out`: undefined when `master` is the parameter storage itself (fp32 training),
  /// else a bf16/fp16 [numel] tensor that receives the rounded master weights. Each element's
  /// update reads and writes that element alone, so any split into ranges gives the same bits.
  /// Matches torch::optim::AdamW / Adam / SGD numerically.
  void update(int64_t begin, int64_t end, const at::Tensor& master, const at::Tensor& grad,
              double grad_multiplier, const at::Tensor& param_out, double lr);

  int64_t step_count() const { return step_count_; }
  /// For checkpoints: the steps taken so far (Adam's bias correction, SGD's first step).
  void set_step_count(int64_t steps) { step_count_ = steps; }
  /// Bytes of optimizer state (Adam: m and v; SGD with momentum: the momentum buffer).
  int64_t state_bytes() const;
  /// The state tensors, for inspection and checkpoints: Adam {exp_avg, exp_avg_sq},
  /// SGD {momentum_buffer} (undefined tensors when unused).
  const at::Tensor& first_moment() const { return exp_avg_; }
  const at::Tensor& second_moment() const { return exp_avg_sq_; }

 private:
  OptimizerConfig config_;
  int64_t numel_;
  int64_t step_count_ = 0;
  at::Tensor exp_avg_;     // Adam m, or SGD momentum buffer
  at::Tensor exp_avg_sq_;  // Adam v
};

}  // namespace zero
