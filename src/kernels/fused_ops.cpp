// Autograd functions over the fused kernels (kernels/fused_ops.h).
#include "kernels/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

#include "common/env.h"
#include "kernels/fused_kernels.h"

namespace zero::fused {
namespace {

// -1: not read from the environment yet.
std::atomic<int> state{-1};

bool applies(std::initializer_list<const at::Tensor*> tensors) {
  if (!enabled()) return false;
  const at::ScalarType dtype = (*tensors.begin())->scalar_type();
  for (const at::Tensor* t : tensors) {
    // Empty tensors (a zero width) take the composition: the kernels' rows need elements.
    if (!kernels::supported(*t) || t->scalar_type() != dtype || t->numel() == 0) return false;
  }
  return true;
}

struct BiasGelu : torch::autograd::Function<BiasGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& u,
                            const at::Tensor& bias) {
    ctx->save_for_backward({u, bias});
    return kernels::bias_gelu(u, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const kernels::BiasGeluGrads g =
        kernels::bias_gelu_backward(grads[0].contiguous(), saved[0], saved[1]);
    return {g.input, g.bias};
  }
};

struct ResidualLayerNorm : torch::autograd::Function<ResidualLayerNorm> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                double eps) {
    kernels::ResidualNorm out = kernels::residual_layer_norm(x, a, weight, bias, eps);
    ctx->save_for_backward({out.sum, out.mean, out.rstd, weight});
    return {out.sum, out.normalized};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor grad_sum = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {grad_sum, grad_sum, at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g = kernels::residual_layer_norm_backward(
        grads[1].contiguous(), grad_sum, saved[0], saved[1], saved[2], saved[3]);
    return {g.input, g.input, g.weight, g.bias, at::Tensor()};
  }
};

// RMSNorm of x alone (a block's first norm, the final norm).
struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    kernels::ResidualNorm out = kernels::residual_rms_norm(x, at::Tensor(), weight, eps);
    ctx->save_for_backward({x, out.rstd, weight});
    return out.normalized;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g = kernels::residual_rms_norm_backward(
        grads[0].contiguous(), at::Tensor(), saved[0], saved[1], saved[2]);
    return {g.input, g.weight, at::Tensor()};
  }
};

// h = x + a, then RMSNorm of h (a block's second norm).
struct ResidualRmsNorm : torch::autograd::Function<ResidualRmsNorm> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& weight, double eps) {
    kernels::ResidualNorm out = kernels::residual_rms_norm(x, a, weight, eps);
    ctx->save_for_backward({out.sum, out.rstd, weight});
    return {out.sum, out.normalized};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor grad_sum = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {grad_sum, grad_sum, at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g = kernels::residual_rms_norm_backward(
        grads[1].contiguous(), grad_sum, saved[0], saved[1], saved[2]);
    return {g.input, g.input, g.weight, at::Tensor()};
  }
};

// HF's LlamaRMSNorm in ATen operations: normalised in fp32, rounded, then scaled.
at::Tensor composed_rms_norm(const at::Tensor& h, const at::Tensor& weight, double eps) {
  const at::Tensor h32 = h.to(at::kFloat);
  const at::Tensor normalized = h32 * at::rsqrt(h32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normalized.to(h.scalar_type());
}

bool rms_norm_fuses(const at::Tensor& x, const at::Tensor& weight) {
  return applies({&x, &weight}) && weight.dim() == 1 && x.size(-1) == weight.numel();
}

}  // namespace

bool enabled() {
  int value = state.load(std::memory_order_acquire);
  if (value < 0) {
    int expected = -1;
    state.compare_exchange_strong(expected, env::fused_kernels() ? 1 : 0);
    value = state.load(std::memory_order_acquire);
  }
  return value == 1;
}

void set_enabled(bool on) { state.store(on ? 1 : 0, std::memory_order_release); }

bool fuses(const at::Tensor& input, const at::Tensor& parameter) {
  return applies({&input, &parameter});
}

at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias) {
  if (!applies({&u, &bias}) || bias.dim() != 1 || u.size(-1) != bias.numel()) {
    return at::gelu(u + bias, "tanh");
  }
  return BiasGelu::apply(u, bias);
}

std::pair<at::Tensor, at::Tensor> residual_layer_norm(const at::Tensor& x, const at::Tensor& a,
                                                      const at::Tensor& weight,
                                                      const at::Tensor& bias, double eps) {
  if (!applies({&x, &a, &weight, &bias}) || x.sizes() != a.sizes() || weight.dim() != 1 ||
      bias.sizes() != weight.sizes() || x.size(-1) != weight.numel()) {
    const at::Tensor h = x + a;
    return {h, at::layer_norm(h, {weight.numel()}, weight, bias, eps)};
  }
  const auto out = ResidualLayerNorm::apply(x, a, weight, bias, eps);
  return {out[0], out[1]};
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!rms_norm_fuses(x, weight)) return composed_rms_norm(x, weight, eps);
  return RmsNorm::apply(x, weight, eps);
}

std::pair<at::Tensor, at::Tensor> residual_rms_norm(const at::Tensor& x, const at::Tensor& a,
                                                    const at::Tensor& weight, double eps) {
  if (!rms_norm_fuses(x, weight) || !applies({&x, &a}) || x.sizes() != a.sizes()) {
    const at::Tensor h = x + a;
    return {h, composed_rms_norm(h, weight, eps)};
  }
  const auto out = ResidualRmsNorm::apply(x, a, weight, eps);
  return {out[0], out[1]};
}

}  // namespace zero::fused
