// The fused kernels of a GPU (Note [Fused element-wise kernels], kernels/fused_kernels.h),
// behind the CPU kernels' contract: the same operations, arguments and results, on CUDA tensors.
// libzero_cuda provides them (src/cuda/fused_kernels_cuda.cpp) and registers them when it is
// loaded (zero_cuda_support_v1); the engine library cannot link CUDA, so it reaches them only
// through this table. kernels/fused_ops.cpp picks the table or the CPU kernels per call.
#pragma once

#include <ATen/core/Tensor.h>

#include "kernels/fused_kernels.h"
#include "zero/export.h"

namespace zero::kernels {

struct DeviceKernels {
  /// Whether `t` is a tensor these kernels take: on their device, fp32/bf16/fp16, contiguous.
  bool (*supported)(const at::Tensor& t);
  at::Tensor (*bias_gelu)(const at::Tensor& u, const at::Tensor& bias);
  BiasGeluGrads (*bias_gelu_backward)(const at::Tensor& grad_out, const at::Tensor& u,
                                      const at::Tensor& bias);
  /// residual_layer_norm (rms false; bias defined) or residual_rms_norm (rms true; bias
  /// undefined, `a` may be).
  ResidualNorm (*residual_norm)(const at::Tensor& x, const at::Tensor& a,
                                const at::Tensor& weight, const at::Tensor& bias, double eps,
                                bool rms);
  /// Their backwards (rms: `mean` undefined, no bias gradient).
  ResidualNormGrads (*residual_norm_backward)(const at::Tensor& grad_normalized,
                                              const at::Tensor& grad_sum, const at::Tensor& sum,
                                              const at::Tensor& mean, const at::Tensor& rstd,
                                              const at::Tensor& weight, bool rms);
};

/// Registers the CUDA kernels (a table that lives as long as the process); later calls replace.
ZERO_INTERNAL_API void register_cuda_kernels(const DeviceKernels* kernels);

/// The CUDA kernels, loading libzero_cuda on first use where this zero was built with it;
/// nullptr where there are none (then the models compose ATen's operations on a GPU).
ZERO_INTERNAL_API const DeviceKernels* cuda_kernels();

}  // namespace zero::kernels
