// The fused kernels of a transformer block as differentiable operations (Note [Fused
// element-wise kernels], kernels/fused_kernels.h), for the models: each takes the fused kernel
// where it applies (enabled(), tensors of one dtype among fp32/bf16/fp16 on the CPU, or on a
// GPU whose kernels libzero_cuda provides: kernels/device_kernels.h) and ATen's composition of
// the same operations elsewhere (another device or dtype, or fusion turned off).
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "zero/export.h"

namespace zero::fused {

/// Whether the fused kernels are used: ZERO_FUSED_KERNELS (src/common/env.h) until set_enabled.
ZERO_INTERNAL_API bool enabled();
/// For tests and benchmarks: every later call fuses or composes.
ZERO_INTERNAL_API void set_enabled(bool on);

/// Whether an operation on `input` with `parameter` fuses: enabled() and both contiguous
/// tensors of one dtype among fp32/bf16/fp16 on one device that has the kernels. Models take
/// ATen's own (unfused) form of the whole computation where not, as they did before the
/// kernels existed.
ZERO_INTERNAL_API bool fuses(const at::Tensor& input, const at::Tensor& parameter);

/// Whether a model's norms and activations fuse on the host (on_host) or on its GPU: for
/// memory plans, which count what the fused and the composed forms keep.
ZERO_INTERNAL_API bool fuses_where(bool on_host);

/// gelu(u + bias) in its tanh form (HF's "gelu_new"): u [..., F], bias [F].
ZERO_INTERNAL_API at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias);

/// {h = x + a, layer_norm(h, weight, bias, eps)} over the last dimension: x, a [..., C].
ZERO_INTERNAL_API std::pair<at::Tensor, at::Tensor> residual_layer_norm(
    const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight, const at::Tensor& bias,
    double eps);

/// RMSNorm over the last dimension, as HF's LlamaRMSNorm: weight * (x / sqrt(mean(x^2) + eps)),
/// x [..., C], weight [C]. Fused: computed in fp32 and rounded once (ATen's composition, as
/// HF's, rounds the normalised value before the scale too).
ZERO_INTERNAL_API at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

/// {h = x + a, rms_norm(h, weight, eps)}: x, a [..., C].
ZERO_INTERNAL_API std::pair<at::Tensor, at::Tensor> residual_rms_norm(const at::Tensor& x,
                                                                      const at::Tensor& a,
                                                                      const at::Tensor& weight,
                                                                      double eps);

}  // namespace zero::fused
