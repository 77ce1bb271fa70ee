// The Adagrad and Lion loops of ShardOptimizer (src/optim/shard_optimizer.cpp), as
// adam_kernels.h is Adam's: one function per instruction-set level, exposed so that tests can
// run each level this CPU has and check that they agree bitwise (tests/test_optimizer.cpp).
// Internal: not part of the installed API.
//
// Every level computes, per element and in the order written (one IEEE rounding per
// operation: no fused multiply-add, exact division and square root), so all levels give the
// same bits:
//   Adagrad (torch.optim.Adagrad's update):
//     g = grad * grad_multiplier;  g = g + weight_decay * p (only when weight_decay != 0);
//     sum = sum + g * g;  p = p - step_size * (g / (sqrt(sum) + eps))
//   with step_size = lr / (1 + (step - 1) lr_decay).
//   Lion (Chen et al., "Symbolic Discovery of Optimization Algorithms", 2023, Algorithm 2):
//     g = grad * grad_multiplier;  p = p * decay_factor (1 - lr weight_decay);
//     c = m * beta1 + (1 - beta1) * g;  p = p - lr * sign(c);  m = m * beta2 + (1 - beta2) * g
//   with sign(0) = 0, as the paper and torch.sign have it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "common/simd_level.h"
#include "zero/config.h"

namespace zero {

struct AdagradScalars {
  float grad_multiplier;
  float weight_decay;
  bool decay;  // weight_decay != 0: torch adds nothing otherwise (not even 0 * p)
  float eps;
  float step_size;  // lr / (1 + (step - 1) lr_decay)
};

struct LionScalars {
  float grad_multiplier;
  float decay_factor;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float lr;
};

/// The scalars of step `step` (1-based) of an Adagrad / a Lion `config`, computed in double as
/// torch computes them and applied as float.
AdagradScalars adagrad_scalars(const OptimizerConfig& config, int64_t step,
                               double grad_multiplier, double lr);
LionScalars lion_scalars(const OptimizerConfig& config, double grad_multiplier, double lr);

/// One update of contiguous tensors of one length with the loops of `level` (at most
/// simd_level()), split over libtorch's intra-op threads: `master` fp32, updated; `grad`
/// fp32/bf16/fp16; `param_out` undefined or bf16/fp16, receives the rounded master weights;
/// the state (`sum`, `exp_avg`) fp32, updated.
void adagrad_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                    const at::Tensor& param_out, const at::Tensor& sum, const AdagradScalars& s);
void lion_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                 const at::Tensor& param_out, const at::Tensor& exp_avg, const LionScalars& s);

}  // namespace zero
