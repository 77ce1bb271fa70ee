// Autograd functions over the fused kernels (kernels/fused_ops.h).
#include "kernels/fused_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <atomic>

#include "common/env.h"
#include "kernels/device_kernels.h"
#include "kernels/fused_kernels.h"

namespace zero::fused {
namespace {

// -1: not read from the environment yet.
std::atomic<int> state{-1};

// Whether one tensor can go through the kernels of `device`'s type (CPU, or a GPU's table).
bool kernel_takes(const at::Tensor& t, const at::Device& device) {
  if (!t.defined() || t.device() != device) return false;
  if (device.is_cpu()) return kernels::supported(t);
  const kernels::DeviceKernels* gpu = device.is_cuda() ? kernels::cuda_kernels() : nullptr;
  return gpu != nullptr && gpu->supported(t);
}

bool applies(std::initializer_list<const at::Tensor*> tensors) {
  if (!enabled()) return false;
  const at::Tensor& first = **tensors.begin();
  if (!first.defined()) return false;
  for (const at::Tensor* t : tensors) {
    // Empty tensors (a zero width) take the composition: the kernels' rows need elements.
    if (!kernel_takes(*t, first.device()) || t->scalar_type() != first.scalar_type() ||
        t->numel() == 0) {
      return false;
    }
  }
  return true;
}

// The kernels for a tensor that applies() accepted: the CPU's, or its GPU's.
const kernels::DeviceKernels* gpu_kernels_for(const at::Tensor& t) {
  return t.is_cpu() ? nullptr : kernels::cuda_kernels();
}

at::Tensor run_bias_gelu(const at::Tensor& u, const at::Tensor& bias) {
  if (const auto* gpu = gpu_kernels_for(u)) return gpu->bias_gelu(u, bias);
  return kernels::bias_gelu(u, bias);
}

kernels::BiasGeluGrads run_bias_gelu_backward(const at::Tensor& grad, const at::Tensor& u,
                                              const at::Tensor& bias) {
  if (const auto* gpu = gpu_kernels_for(u)) return gpu->bias_gelu_backward(grad, u, bias);
  return kernels::bias_gelu_backward(grad, u, bias);
}

// residual_layer_norm (rms false) or residual_rms_norm (rms true, bias undefined).
kernels::ResidualNorm run_residual_norm(const at::Tensor& x, const at::Tensor& a,
                                        const at::Tensor& weight, const at::Tensor& bias,
                                        double eps, bool rms) {
  if (const auto* gpu = gpu_kernels_for(x)) return gpu->residual_norm(x, a, weight, bias, eps, rms);
  return rms ? kernels::residual_rms_norm(x, a, weight, eps)
             : kernels::residual_layer_norm(x, a, weight, bias, eps);
}

kernels::ResidualNormGrads run_residual_norm_backward(const at::Tensor& grad_normalized,
                                                      const at::Tensor& grad_sum,
                                                      const at::Tensor& sum,
                                                      const at::Tensor& mean,
                                                      const at::Tensor& rstd,
                                                      const at::Tensor& weight, bool rms) {
  if (const auto* gpu = gpu_kernels_for(sum)) {
    return gpu->residual_norm_backward(grad_normalized, grad_sum, sum, mean, rstd, weight, rms);
  }
  return rms ? kernels::residual_rms_norm_backward(grad_normalized, grad_sum, sum, rstd, weight)
             : kernels::residual_layer_norm_backward(grad_normalized, grad_sum, sum, mean, rstd,
                                                     weight);
}

struct BiasGelu : torch::autograd::Function<BiasGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& u,
                            const at::Tensor& bias) {
    ctx->save_for_backward({u, bias});
    return run_bias_gelu(u, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const kernels::BiasGeluGrads g =
        run_bias_gelu_backward(grads[0].contiguous(), saved[0], saved[1]);
    return {g.input, g.bias};
  }
};

struct ResidualLayerNorm : torch::autograd::Function<ResidualLayerNorm> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& weight, const at::Tensor& bias,
                                                double eps) {
    kernels::ResidualNorm out = run_residual_norm(x, a, weight, bias, eps, /*rms=*/false);
    ctx->save_for_backward({out.sum, out.mean, out.rstd, weight});
    return {out.sum, out.normalized};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor grad_sum = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {grad_sum, grad_sum, at::Tensor(), at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g =
        run_residual_norm_backward(grads[1].contiguous(), grad_sum, saved[0], saved[1], saved[2],
                                   saved[3], /*rms=*/false);
    return {g.input, g.input, g.weight, g.bias, at::Tensor()};
  }
};

// RMSNorm of x alone (a block's first norm, the final norm).
struct RmsNorm : torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, double eps) {
    kernels::ResidualNorm out =
        run_residual_norm(x, at::Tensor(), weight, at::Tensor(), eps, /*rms=*/true);
    ctx->save_for_backward({x, out.rstd, weight});
    return out.normalized;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g =
        run_residual_norm_backward(grads[0].contiguous(), at::Tensor(), saved[0], at::Tensor(),
                                   saved[1], saved[2], /*rms=*/true);
    return {g.input, g.weight, at::Tensor()};
  }
};

// h = x + a, then RMSNorm of h (a block's second norm).
struct ResidualRmsNorm : torch::autograd::Function<ResidualRmsNorm> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const at::Tensor& x, const at::Tensor& a,
                                                const at::Tensor& weight, double eps) {
    kernels::ResidualNorm out = run_residual_norm(x, a, weight, at::Tensor(), eps, /*rms=*/true);
    ctx->save_for_backward({out.sum, out.rstd, weight});
    return {out.sum, out.normalized};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor grad_sum = grads[0].defined() ? grads[0].contiguous() : at::Tensor();
    if (!grads[1].defined()) return {grad_sum, grad_sum, at::Tensor(), at::Tensor()};
    const auto saved = ctx->get_saved_variables();
    const kernels::ResidualNormGrads g =
        run_residual_norm_backward(grads[1].contiguous(), grad_sum, saved[0], at::Tensor(),
                                   saved[1], saved[2], /*rms=*/true);
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

bool fuses_where(bool on_host) {
  return enabled() && (on_host || kernels::cuda_kernels() != nullptr);
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
