// LAMB (You et al., "Large Batch Optimization for Deep Learning", 2019) as DeepSpeed's
// FusedLamb computes it, over the flat shard space. Internal: not part of the installed API.
//
// Note [LAMB's norms across shards]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Per element, with t the step and bc = 1 - beta^t (1 without bias correction):
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;
//   u = (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay p   (eps_inside_sqrt: sqrt(v/bc2 + eps))
// and per parameter, trust = ||p|| / ||u|| clamped to [min_coeff, max_coeff] (1 when either
// norm is 0), then p = p - lr trust u. A parameter's elements lie in the shards of several
// ranks at stages 1-3 (of one at stage 0, which steps all of them on every rank), cut where the
// shard layout says, which depends on the stage and the world size. So that the norms, and the
// step, are the same bits however the parameter is cut, each rank sums the squares of the
// elements it saves (its 1/N of the space: every element counted once over the ranks) exactly
// (common/exact_squares.h: integer sums, associative), the ranks' sums are gathered and added
// as integers, and only then rounded to a double. ShardState runs it as two passes over the
// tiles: the moments and the sums, then, after the exchange, the update with each parameter's
// trust ratio (u recomputed from the stored m and v, bitwise the first pass's).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/exact_squares.h"
#include "zero/config.h"

namespace zero {

struct LambScalars {
  float grad_multiplier;
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction1, bias_correction2;  // 1 - beta^t, or 1
  float eps, weight_decay;
  bool eps_inside_sqrt;
};

/// The scalars of step `step` (1-based) of a LAMB `config`.
LambScalars lamb_scalars(const OptimizerConfig& config, int64_t step, double grad_multiplier);

/// Pass 1 on contiguous tensors of one length: the moments `exp_avg`, `exp_avg_sq` (fp32)
/// updated from `grad` (fp32/bf16/fp16, times grad_multiplier).
void lamb_moments(const at::Tensor& grad, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  const LambScalars& s);

/// The squares of the weights `master` and of their updates u (from the moments), added to
/// `weights` and `updates`.
void lamb_norms(const at::Tensor& master, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                const LambScalars& s, ExactSquares& weights, ExactSquares& updates);

/// LAMB's trust ratio for the norms of a parameter's weights and update (their squares'
/// sums): sqrt(w) / sqrt(u) clamped to [min_coeff, max_coeff], 1 when either is 0.
double lamb_trust_ratio(double weight_squares, double update_squares,
                        const OptimizerConfig& config);

/// Pass 2: master = master - step_size u (step_size = lr trust), and `param_out` (undefined,
/// or bf16/fp16) the rounded master.
void lamb_apply(const at::Tensor& master, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                const at::Tensor& param_out, const LambScalars& s, double step_size);

}  // namespace zero
