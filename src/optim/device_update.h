// ShardOptimizer's update off the CPU (parameters on a GPU), where the SIMD loops of
// shard_optimizer.cpp cannot run. Internal: not part of the installed API.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "optim/shard_optimizer.h"
#include "zero/config.h"

namespace zero {

/// Step `step` (1-based) of `config`'s optimizer on one range, with ShardOptimizer::update's
/// contract (master fp32 updated; grad fp32/bf16/fp16, used as grad * grad_multiplier, which
/// stays on the device where it lives there: nothing of the step is read back to the host;
/// param_out undefined or 16-bit, receives the rounded master; moments fp32 in
/// moment_names() order), through ATen's fused multi-tensor kernels on the tensors' device:
/// _fused_adamw_ / _fused_adam_ / _fused_sgd_, each one launch, with the learning rate and
/// step on the host. A 16-bit gradient is widened into an fp32 copy first (the fused kernels
/// take one dtype). Adam without bias correction, which the fused kernels do not offer, runs
/// as a few ATen ops. Matches torch::optim to rounding, not bitwise: the kernels fuse
/// multiply-adds where the CPU loop does not. Any device ATen has these kernels for (CUDA; the
/// CPU too, which is how tests/test_optimizer.cpp checks it).
void fused_device_update(const OptimizerConfig& config, int64_t step, const at::Tensor& master,
                         const at::Tensor& grad, const at::Tensor& param_out,
                         const std::vector<at::Tensor>& moments,
                         const GradMultiplier& grad_multiplier, double lr);

}  // namespace zero
