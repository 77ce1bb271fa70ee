// Note [fp16 GEMMs on CPUs without fp16 arithmetic] (half_gemm.h).
#include "hardware/half_gemm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "common/env.h"
#include "zero/gemm_rates.h"

namespace zero::half_gemm {
namespace {

Path decided_path() {
  const std::string chosen = env::fp16_gemm_path();
  if (chosen == "native") return Path::kNative;
  if (chosen == "fp32") return Path::kViaFp32;
  const auto& flags = measured_gemm_rates().isa_flags();  // reads /proc/cpuinfo; measures nothing
  const bool fp16_arithmetic = std::find(flags.begin(), flags.end(), "avx512_fp16") != flags.end() ||
                               std::find(flags.begin(), flags.end(), "amx_fp16") != flags.end();
  return fp16_arithmetic ? Path::kNative : Path::kViaFp32;
}

// -1: not decided yet.
std::atomic<int> current{-1};

at::Tensor fp32(const at::Tensor& t) { return t.to(at::kFloat); }

struct HalfAddmm : torch::autograd::Function<HalfAddmm> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& bias,
                            const at::Tensor& x, const at::Tensor& weight) {
    // No bias: an empty one (autograd functions take defined tensors only).
    const bool has_bias = bias.numel() > 0;
    ctx->save_for_backward({x, weight});
    ctx->saved_data["bias_grad"] = has_bias && bias.requires_grad();
    const at::Tensor product = has_bias ? at::addmm(fp32(bias), fp32(x), fp32(weight))
                                        : at::mm(fp32(x), fp32(weight));
    return product.to(at::kHalf);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor g = fp32(grads[0]);
    at::Tensor grad_bias, grad_x, grad_weight;
    if (ctx->saved_data["bias_grad"].toBool()) grad_bias = g.sum(0).to(at::kHalf);
    if (ctx->needs_input_grad(1)) grad_x = at::mm(g, fp32(weight).t()).to(at::kHalf);
    if (ctx->needs_input_grad(2)) grad_weight = at::mm(fp32(x).t(), g).to(at::kHalf);
    return {grad_bias, grad_x, grad_weight};
  }
};

}  // namespace

Path path() {
  int value = current.load(std::memory_order_acquire);
  if (value < 0) {
    int expected = -1;
    current.compare_exchange_strong(expected, static_cast<int>(decided_path()));
    value = current.load(std::memory_order_acquire);
  }
  return static_cast<Path>(value);
}

void set_path(Path path) { current.store(static_cast<int>(path), std::memory_order_release); }

const char* path_name(Path path) { return path == Path::kViaFp32 ? "via fp32" : "native"; }

bool via_fp32(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf && t.is_cpu() && path() == Path::kViaFp32;
}

bool computes_in_fp32(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf && t.is_cpu();
}

at::Tensor operand(const at::Tensor& t) { return via_fp32(t) ? fp32(t) : t; }

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  if (!via_fp32(a)) return at::mm(a, b);
  return at::mm(fp32(a), fp32(b)).to(at::kHalf);
}

void mm_out(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b) {
  if (!via_fp32(a)) {
    at::Tensor result = out;
    at::mm_out(result, a, b);
    return;
  }
  out.copy_(at::mm(fp32(a), fp32(b)));
}

void addmm_out(const at::Tensor& out, const at::Tensor& self, const at::Tensor& a,
               const at::Tensor& b, double beta, double alpha) {
  if (!via_fp32(a)) {
    at::Tensor result = out;
    at::addmm_out(result, self, a, b, beta, alpha);
    return;
  }
  // beta 0 ignores `self` (it may hold anything, as in at::addmm).
  at::Tensor sum = beta == 0 ? at::mm(fp32(a), fp32(b)).mul_(alpha)
                             : at::addmm(fp32(self), fp32(a), fp32(b), beta, alpha);
  out.copy_(sum);
}

at::Tensor addmm(const at::Tensor& bias, const at::Tensor& x, const at::Tensor& weight) {
  if (!via_fp32(x)) return bias.defined() ? at::addmm(bias, x, weight) : at::mm(x, weight);
  return HalfAddmm::apply(bias.defined() ? bias : at::empty({0}, x.options()), x, weight);
}

}  // namespace zero::half_gemm
