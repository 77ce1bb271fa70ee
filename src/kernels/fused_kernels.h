// Fused element-wise kernels of a transformer block on the CPU: bias + GELU and residual add +
// LayerNorm, forward and backward, each one pass over its rows.
//
// Note [Fused element-wise kernels]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Around its GEMMs a GPT-2 block runs element-wise work that ATen does as separate passes over
// memory: the MLP's bias add (a copy of the bias into the GEMM's output), tanh-GELU, and in
// backward the GELU derivative and the bias gradient (a column sum) as two more passes; the
// residual add, then LayerNorm's statistics and output, and in backward LayerNorm's input
// gradient plus the residual's gradient added to it. Here each is one pass per row:
//   bias_gelu:            g = gelu(u + b), from the bias-less GEMM output u (saved instead of
//                         u + b: the same bytes);
//   bias_gelu_backward:   du = dg gelu'(u + b), db = column sums of du;
//   residual_layer_norm:  h = x + a (rounded to the dtype, as the unfused sum is), y = LN(h);
//   ..._backward:         dh = LN'(dy) + dh_residual (rounded once), dw and db column sums;
//   residual_rms_norm:    the same with RMSNorm (Llama's: the mean taken as 0, no bias), the
//                         sum optional (a block's first norm normalises its input alone).
// The row is the unit of work (it stays in L1 across its passes), as it is of a GPU kernel's
// thread block; rows are split over libtorch's threads in fixed blocks of kRowsPerBlock, and
// the column sums go to one fp32 partial per block, added in block order: the results do not
// depend on the thread count. Arithmetic is fp32 whatever the dtype (bf16/fp16 loaded exactly,
// results rounded once; RMSNorm's twice, Note [RMSNorm's rounding]).
// GELU is the tanh form as x sigmoid(2z) (1 + tanh z = 2 sigmoid(2z))
// with an exp of ~1 ulp (simd::exp_reference); its vector and scalar loops give the same bits.
// LayerNorm takes its mean and variance in two passes over the row, summed across lanes.
// Against ATen's composition: within a few fp32 ulps (fp32) or the dtype's rounding (16-bit),
// tests/test_fused_kernels.cpp. Every training path (all stages and world sizes) runs the
// same kernels, so the engines' bitwise cross-stage equalities hold.
//
// Note [RMSNorm's rounding]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// In bf16/fp16 RMSNorm's output is rounded twice, as transformers' LlamaRMSNorm (and Mistral's
// and Qwen2's) computes it: x̂ = h rsqrt(mean(h^2) + eps) in fp32 rounded to the dtype, then
// w x̂ rounded again, so zero's 16-bit logits are transformers' rather than one rounding more
// accurate and an ulp away. LayerNorm keeps one rounding: ATen's layer_norm (GPT-2's) has one.
// The backward computes in fp32 from x̂ unrounded (the rounding's derivative is taken as 1,
// as autograd takes that of a cast).
// Selected at run time: ZERO_FUSED_KERNELS=0 (src/common/env.h) or set_enabled(false) gives
// ATen's composition back (zero::kernels::fused_ops.h decides per call). On a GPU the same
// operations run as CUDA kernels (Note [Fused element-wise kernels on a GPU],
// src/cuda/kernels/fused_kernels.cu) with the same formulas (kernels/fused_formulas.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/simd_level.h"
#include "zero/export.h"

namespace zero::kernels {

/// Whether a tensor can go through these kernels: on the CPU, fp32/bf16/fp16, contiguous.
ZERO_INTERNAL_API bool supported(const at::Tensor& t);

/// gelu_tanh(u + bias): u [..., F], bias [F], the same dtype.
ZERO_INTERNAL_API at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias,
                                       SimdLevel level = simd_level());

struct BiasGeluGrads {
  at::Tensor input;  // du, u's shape and dtype
  at::Tensor bias;   // db [F], bias's dtype (summed in fp32)
};
ZERO_INTERNAL_API BiasGeluGrads bias_gelu_backward(const at::Tensor& grad_out, const at::Tensor& u,
                                                   const at::Tensor& bias,
                                                   SimdLevel level = simd_level());

struct ResidualNorm {
  at::Tensor sum;         // h = x + a
  at::Tensor normalized;  // LayerNorm(h) * weight + bias
  at::Tensor mean, rstd;  // per row, fp32 [rows]
};
/// x, a [..., C], weight and bias [C], one dtype; eps > 0.
ZERO_INTERNAL_API ResidualNorm residual_layer_norm(const at::Tensor& x, const at::Tensor& a,
                                                   const at::Tensor& weight, const at::Tensor& bias,
                                                   double eps, SimdLevel level = simd_level());

struct ResidualNormGrads {
  at::Tensor input;          // dh: LayerNorm's input gradient plus grad_sum (x's and a's)
  at::Tensor weight, bias;   // [C], weight's dtype (summed in fp32)
};
/// grad_normalized [..., C]; grad_sum the gradient reaching h by the residual path (undefined:
/// none); sum, mean, rstd as residual_layer_norm returned them.
ZERO_INTERNAL_API ResidualNormGrads residual_layer_norm_backward(
    const at::Tensor& grad_normalized, const at::Tensor& grad_sum, const at::Tensor& sum,
    const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& weight,
    SimdLevel level = simd_level());

/// RMSNorm (Llama's): h = x + a (`a` undefined: h is x itself, not copied), y = h rstd weight
/// with rstd = 1 / sqrt(mean(h^2) + eps) per row (`mean` left undefined, `sum` is x without a).
ZERO_INTERNAL_API ResidualNorm residual_rms_norm(const at::Tensor& x, const at::Tensor& a,
                                                 const at::Tensor& weight, double eps,
                                                 SimdLevel level = simd_level());
/// Its backward, as residual_layer_norm_backward's without the mean's terms (no bias
/// gradient: `bias` undefined).
ZERO_INTERNAL_API ResidualNormGrads residual_rms_norm_backward(
    const at::Tensor& grad_normalized, const at::Tensor& grad_sum, const at::Tensor& sum,
    const at::Tensor& rstd, const at::Tensor& weight, SimdLevel level = simd_level());

}  // namespace zero::kernels
