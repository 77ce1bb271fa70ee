// The fused Adam(W) loop of ShardOptimizer (src/optim/shard_optimizer.cpp), one function per
// instruction-set level, exposed so that tests can run each level this CPU has and check that
// they agree bitwise (tests/test_optimizer.cpp). Internal: not part of the installed API.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/simd_level.h"
#include "zero/config.h"

namespace zero {

/// The scalars of one Adam(W) update, folded once per step: torch computes these in double and
/// applies them as float, which is what the loop does too.
struct AdamScalars {
  float grad_multiplier;
  float decay_factor;  // AdamW: 1 - lr * wd (Adam: 1)
  float l2;            // Adam: wd, added to the gradient as wd * p (AdamW: 0)
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float step_size;  // lr / bias_correction1
};

/// The scalars of step `step` (1-based) of an Adam/AdamW `config`.
AdamScalars adam_scalars(const OptimizerConfig& config, int64_t step, double grad_multiplier,
                         double lr);

/// One Adam(W) update of contiguous tensors of one length, run with the loops of `level` (at
/// most simd_level()), split over libtorch's intra-op threads: `master` fp32, updated; `grad`
/// fp32/bf16/fp16; `param_out` undefined or bf16/fp16, receives the rounded master weights;
/// `exp_avg`, `exp_avg_sq` fp32, updated. Every level computes, per element and in this order,
///   p = master * decay_factor;  g = grad * grad_multiplier;  g = g + l2 * p;
///   m = m * beta1 + (1 - beta1) * g;  v = v * beta2 + (1 - beta2) * g * g;
///   p = p - step_size * (m / (sqrt(v) / bias_correction2_sqrt + eps))
/// with one IEEE rounding per operation (no fused multiply-add, exact division and square root),
/// so all levels give the same bits: ShardOptimizer::update runs simd_level().
void adam_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                 const at::Tensor& param_out, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, const AdamScalars& s);

}  // namespace zero
