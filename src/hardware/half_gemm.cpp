// Note [fp16 GEMMs on CPUs without fp16 arithmetic] (half_gemm.h).
#include "hardware/half_gemm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "common/env.h"
#include "zero/error.h"
#include "zero/gemm_rates.h"

namespace zero::half_gemm {
namespace {

bool has_flag(const char* flag) {
  const auto& flags = measured_gemm_rates().isa_flags();  // reads /proc/cpuinfo; measures nothing
  return std::find(flags.begin(), flags.end(), flag) != flags.end();
}

Path decided_fp16_path() {
  const std::string chosen = env::fp16_gemm_path();
  if (chosen == "native") return Path::kNative;
  if (chosen == "fp32") return Path::kViaFp32;
  return has_flag("avx512_fp16") || has_flag("amx_fp16") ? Path::kNative : Path::kViaFp32;
}

Path decided_bf16_path() {
  const std::string chosen = env::bf16_gemm_path();
  if (chosen == "native") return Path::kNative;
  if (chosen == "fp32") return Path::kViaFp32;
  return has_flag("avx512_bf16") || has_flag("amx_bf16") ? Path::kNative : Path::kViaFp32;
}

// Per dtype (0: fp16, 1: bf16); -1: not decided yet.
std::atomic<int> current[2] = {-1, -1};

int slot(at::ScalarType dtype) {
  ZERO_INTERNAL_ASSERT(dtype == at::kHalf || dtype == at::kBFloat16,
                       "half_gemm: paths exist for fp16 and bf16, not ", dtype);
  return dtype == at::kHalf ? 0 : 1;
}

bool sixteen_bit(at::ScalarType dtype) { return dtype == at::kHalf || dtype == at::kBFloat16; }

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
    return product.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor g = fp32(grads[0]);
    at::Tensor grad_bias, grad_x, grad_weight;
    const at::ScalarType dtype = x.scalar_type();
    if (ctx->saved_data["bias_grad"].toBool()) grad_bias = g.sum(0).to(dtype);
    if (ctx->needs_input_grad(1)) grad_x = at::mm(g, fp32(weight).t()).to(dtype);
    if (ctx->needs_input_grad(2)) grad_weight = at::mm(fp32(x).t(), g).to(dtype);
    return {grad_bias, grad_x, grad_weight};
  }
};

}  // namespace

Path path(at::ScalarType dtype) {
  std::atomic<int>& decided = current[slot(dtype)];
  int value = decided.load(std::memory_order_acquire);
  if (value < 0) {
    int expected = -1;
    const Path chosen = dtype == at::kHalf ? decided_fp16_path() : decided_bf16_path();
    decided.compare_exchange_strong(expected, static_cast<int>(chosen));
    value = decided.load(std::memory_order_acquire);
  }
  return static_cast<Path>(value);
}

void set_path(Path path, at::ScalarType dtype) {
  current[slot(dtype)].store(static_cast<int>(path), std::memory_order_release);
}

const char* path_name(Path path) { return path == Path::kViaFp32 ? "via fp32" : "native"; }

bool via_fp32(const at::Tensor& t) {
  return sixteen_bit(t.scalar_type()) && t.is_cpu() && path(t.scalar_type()) == Path::kViaFp32;
}

bool computes_in_fp32(at::ScalarType dtype) {
  return dtype == at::kHalf || (dtype == at::kBFloat16 && path(dtype) == Path::kViaFp32);
}

bool computes_in_fp32(const at::Tensor& t) { return t.is_cpu() && computes_in_fp32(t.scalar_type()); }

at::Tensor operand(const at::Tensor& t) { return via_fp32(t) ? fp32(t) : t; }

at::Tensor mm(const at::Tensor& a, const at::Tensor& b) {
  if (!via_fp32(a)) return at::mm(a, b);
  return at::mm(fp32(a), fp32(b)).to(a.scalar_type());
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
