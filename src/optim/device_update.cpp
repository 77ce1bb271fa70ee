#include "optim/device_update.h"

#include <ATen/ATen.h>

#include <cmath>

#include "zero/error.h"

namespace zero {

void fused_device_update(const OptimizerConfig& config, int64_t step, const at::Tensor& master,
                         const at::Tensor& grad, const at::Tensor& param_out,
                         const std::vector<at::Tensor>& moments,
                         const GradMultiplier& grad_multiplier, double lr) {
  ZERO_INTERNAL_ASSERT(step > 0, "update before begin_step");
  // The gradient actually used, fp32: a fresh tensor, so the caller's is never modified (an
  // fp32 gradient's to(kFloat) would be the caller's own). The step's multiplier tensor, as
  // a 0-d fp32 one, is not read on the host (on the device, or a host copy alike: a 0-d CPU
  // tensor is a scalar to a device's kernels); the product rounds as the plain value's (a
  // double ATen casts to fp32).
  const at::Tensor g =
      grad_multiplier.is_tensor()
          ? grad.to(at::kFloat).mul(grad_multiplier.factor())
          : (grad.scalar_type() == at::kFloat ? grad.mul(grad_multiplier.value())
                                              : grad.to(at::kFloat).mul_(grad_multiplier.value()));
  if (config.type == OptimizerType::kSGD) {
    std::vector<at::Tensor> buffers(moments.begin(), moments.end());
    at::_fused_sgd_({master}, {g}, buffers, config.weight_decay, config.momentum, lr,
                    config.dampening, config.nesterov, /*maximize=*/false,
                    /*is_first_step=*/step == 1);
  } else if (config.type == OptimizerType::kAdagrad) {
    // torch.optim.Adagrad's update (optim/adagrad_lion.h).
    if (config.weight_decay != 0.0) g.add_(master, config.weight_decay);
    moments[0].addcmul_(g, g);
    const double step_size = lr / (1.0 + static_cast<double>(step - 1) * config.lr_decay);
    master.addcdiv_(g, moments[0].sqrt().add_(config.eps), -step_size);
  } else if (config.type == OptimizerType::kLion) {
    // Lion's update (optim/adagrad_lion.h).
    const at::Tensor& m = moments[0];
    master.mul_(1.0 - lr * config.weight_decay);
    master.add_(m.mul(config.beta1).add_(g, 1.0 - config.beta1).sign_(), -lr);
    m.mul_(config.beta2).add_(g, 1.0 - config.beta2);
  } else if (config.bias_correction) {
    const at::Tensor steps = at::full({}, static_cast<double>(step),
                                      at::TensorOptions().dtype(at::kFloat).device(master.device()));
    // max_exp_avg_sqs: none, without amsgrad.
    if (config.type == OptimizerType::kAdamW) {
      at::_fused_adamw_({master}, {g}, {moments[0]}, {moments[1]}, {}, {steps}, lr, config.beta1,
                        config.beta2, config.weight_decay, config.eps, /*amsgrad=*/false,
                        /*maximize=*/false);
    } else {
      at::_fused_adam_({master}, {g}, {moments[0]}, {moments[1]}, {}, {steps}, lr, config.beta1,
                       config.beta2, config.weight_decay, config.eps, /*amsgrad=*/false,
                       /*maximize=*/false);
    }
  } else {
    // torch's formula with bias corrections of 1 (DeepSpeed's bias_correction false).
    const at::Tensor& m = moments[0];
    const at::Tensor& v = moments[1];
    if (config.type == OptimizerType::kAdamW) {
      master.mul_(1.0 - lr * config.weight_decay);
    } else if (config.weight_decay != 0.0) {
      g.add_(master, config.weight_decay);
    }
    m.mul_(config.beta1).add_(g, 1.0 - config.beta1);
    v.mul_(config.beta2).addcmul_(g, g, 1.0 - config.beta2);
    master.addcdiv_(m, v.sqrt().add_(config.eps), -lr);
  }
  if (param_out.defined()) param_out.copy_(master);
}

}  // namespace zero
