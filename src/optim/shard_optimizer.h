// The optimizer of the owned shard: Adam/AdamW/SGD/Adagrad/Lion over one flat fp32 master
// tensor, in one
// fused, parallel loop that reads the (possibly 16-bit, still summed and scaled) gradient,
// applies the unscale/clip/average multiplier, updates the fp32 master weights and the
// optimizer state, and writes the rounded parameter copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "zero/config.h"

namespace zero {

/// The factor a step multiplies the summed gradients by (unscaling, averaging and clipping in
/// one: Note [Gradient scaling], engine/engine_core.cpp): a value, or the one-element fp64
/// tensor the step computed it in, on the host or on the gradients' device; on a device only
/// the device's kernels read it (Note [A step without a device read]).
class GradMultiplier {
 public:
  GradMultiplier(double value) : host_(value) {}  // NOLINT: a plain value converts
  explicit GradMultiplier(at::Tensor computed);
  /// Whether it is a tensor (the step's), which a device's kernels take without a read.
  bool is_tensor() const { return computed_.defined(); }
  /// The value on the host: a read from the device where the tensor lives there (the paths
  /// that need it, the CPU loops, LAMB's and Muon's steps, never run with it on a GPU).
  double value() const;
  /// The tensor as a 0-d fp32 one where it lives, as a kernel multiplies by a double (made
  /// once: every tile of the step multiplies by it).
  const at::Tensor& factor() const;

 private:
  double host_ = 1.0;
  at::Tensor computed_;  // fp64, one element; undefined for a plain value
  at::Tensor factor_;    // computed_ as a 0-d fp32 tensor
};

class ShardOptimizer {
 public:
  explicit ShardOptimizer(const OptimizerConfig& config) : config_(config) {}

  /// The state it keeps per element, by checkpoint name, in the order update() takes them
  /// (optimizer_state_names, optim/optimizer_state.h). Whoever owns the shard stores them
  /// (src/state/state_store.h).
  std::vector<std::string> moment_names() const;

  /// Starts one optimizer step: advances the step count (Adam's bias correction, SGD's first
  /// step). Then update() covers the shard, in one range or in tiles.
  void begin_step() { ++step_count_; }

  /// The current step on one range of the shard; every tensor is contiguous over that range.
  /// `master`: fp32, updated in place. `grad`: fp32/bf16/fp16; the gradient used is grad *
  /// grad_multiplier (read on the device by the device's kernels where it lives there).
  /// `param_out`: undefined when `master` is the parameter storage itself (fp32 training),
  /// else a bf16/fp16 tensor that receives the rounded master weights.
  /// `moments`: fp32, in moment_names() order, updated in place. Each element's update reads
  /// and writes that element alone, so any split into ranges gives the same bits. Matches
  /// torch::optim::AdamW / Adam / SGD / Adagrad numerically, and Lion's paper.
  void update(const at::Tensor& master, const at::Tensor& grad, const at::Tensor& param_out,
              const std::vector<at::Tensor>& moments, const GradMultiplier& grad_multiplier,
              double lr);

  const OptimizerConfig& config() const { return config_; }
  int64_t step_count() const { return step_count_; }
  /// For checkpoints: the steps taken so far (Adam's bias correction, SGD's first step).
  void set_step_count(int64_t steps) { step_count_ = steps; }

 private:
  OptimizerConfig config_;
  int64_t step_count_ = 0;
};

}  // namespace zero
