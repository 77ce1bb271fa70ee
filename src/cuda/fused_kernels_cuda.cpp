// The CUDA fused kernels (Note [Fused element-wise kernels on a GPU], kernels/fused_kernels.cu)
// behind the CPU kernels' contract (kernels/device_kernels.h): tensors checked, outputs and
// workspaces allocated through libtorch's caching allocator, launches on the tensors' device
// and its current stream (as an ATen operation would be).
#include "cuda/fused_kernels_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/kernels/fused_kernels.cuh"
#include "zero/error.h"

namespace zero {
namespace {

using cuda_kernels::Element;

bool supported(const at::Tensor& t) {
  return t.defined() && t.is_cuda() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 ||
          t.scalar_type() == at::kHalf);
}

Element element_of(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return Element::kFloat;
    case at::kBFloat16: return Element::kBFloat16;
    case at::kHalf: return Element::kHalf;
    default: break;
  }
  ZERO_INTERNAL_ASSERT(false, "CUDA fused kernels: unsupported dtype ", dtype);
  return Element::kFloat;
}

void check_rows(const at::Tensor& t, const at::Tensor& like, int64_t width, const char* what) {
  ZERO_INTERNAL_ASSERT(supported(t) && t.scalar_type() == like.scalar_type() &&
                           t.device() == like.device() && t.dim() >= 1 && t.size(-1) == width,
                       "CUDA fused kernels: ", what, " must be a contiguous ", like.scalar_type(),
                       " tensor on ", like.device(), " of last dimension ", width, ", got ",
                       t.scalar_type(), " ", t.sizes(), " on ", t.device());
}

void check_launch(cudaError_t rc, const char* kernel, int64_t rows, int64_t width) {
  ZERO_CHECK(rc == cudaSuccess, "CUDA kernel ", kernel, " on ", rows, " x ", width,
             " elements failed: ", cudaGetErrorString(rc));
}

const void* data_or_null(const at::Tensor& t) { return t.defined() ? t.const_data_ptr() : nullptr; }
void* mutable_or_null(const at::Tensor& t) { return t.defined() ? t.mutable_data_ptr() : nullptr; }

int64_t rows_of(const at::Tensor& t, int64_t width) {
  return width > 0 ? t.numel() / width : 0;
}

at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias) {
  const int64_t width = bias.numel();
  check_rows(u, u, width, "bias_gelu's input");
  check_rows(bias, u, width, "bias_gelu's bias");
  const c10::cuda::CUDAGuard guard(u.device());
  at::Tensor out = at::empty_like(u);
  cuda_kernels::GeluForward args{u.const_data_ptr(), bias.const_data_ptr(), out.mutable_data_ptr(),
                                 rows_of(u, width), width};
  check_launch(cuda_kernels::bias_gelu_forward(element_of(u.scalar_type()), args,
                                               c10::cuda::getCurrentCUDAStream()),
               "bias_gelu", args.rows, width);
  return out;
}

kernels::BiasGeluGrads bias_gelu_backward(const at::Tensor& grad_out, const at::Tensor& u,
                                          const at::Tensor& bias) {
  const int64_t width = bias.numel();
  check_rows(u, u, width, "bias_gelu_backward's input");
  check_rows(grad_out, u, width, "bias_gelu_backward's gradient");
  check_rows(bias, u, width, "bias_gelu_backward's bias");
  ZERO_INTERNAL_ASSERT(grad_out.sizes() == u.sizes(), "bias_gelu_backward: gradient ",
                       grad_out.sizes(), " for input ", u.sizes());
  const c10::cuda::CUDAGuard guard(u.device());
  const int64_t rows = rows_of(u, width);
  at::Tensor grad_u = at::empty_like(u);
  // No rows: no launch, and a zero bias gradient (as the CPU kernel's).
  at::Tensor grad_bias = rows == 0 ? at::zeros_like(bias) : at::empty_like(bias);
  at::Tensor partials =
      at::empty({cuda_kernels::column_partials(rows), width}, u.options().dtype(at::kFloat));
  cuda_kernels::GeluBackward args{grad_out.const_data_ptr(), u.const_data_ptr(),
                                  bias.const_data_ptr(),     grad_u.mutable_data_ptr(),
                                  partials.mutable_data_ptr<float>(),
                                  grad_bias.mutable_data_ptr(), rows, width};
  check_launch(cuda_kernels::bias_gelu_backward(element_of(u.scalar_type()), args,
                                                c10::cuda::getCurrentCUDAStream()),
               "bias_gelu_backward", rows, width);
  return {grad_u, grad_bias};
}

kernels::ResidualNorm residual_norm(const at::Tensor& x, const at::Tensor& a,
                                    const at::Tensor& weight, const at::Tensor& bias, double eps,
                                    bool rms) {
  const int64_t width = weight.numel();
  const char* what = rms ? "residual_rms_norm" : "residual_layer_norm";
  check_rows(x, x, width, what);
  check_rows(weight, x, width, what);
  if (a.defined()) check_rows(a, x, width, what);
  if (bias.defined()) check_rows(bias, x, width, what);
  ZERO_INTERNAL_ASSERT((!a.defined() || x.sizes() == a.sizes()) && eps > 0 &&
                           (rms || (a.defined() && bias.defined())),
                       what, ": ", x.sizes(), " + ", a.defined() ? a.sizes() : x.sizes(),
                       ", eps ", eps);
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t rows = rows_of(x, width);
  const auto fp32 = x.options().dtype(at::kFloat);
  kernels::ResidualNorm out{a.defined() ? at::empty_like(x) : x, at::empty_like(x),
                            rms ? at::Tensor() : at::empty({rows}, fp32), at::empty({rows}, fp32)};
  cuda_kernels::NormForward args{x.const_data_ptr(),
                                 data_or_null(a),
                                 weight.const_data_ptr(),
                                 data_or_null(bias),
                                 a.defined() ? out.sum.mutable_data_ptr() : nullptr,
                                 out.normalized.mutable_data_ptr(),
                                 rms ? nullptr : out.mean.mutable_data_ptr<float>(),
                                 out.rstd.mutable_data_ptr<float>(),
                                 rows,
                                 width,
                                 static_cast<float>(eps),
                                 rms};
  check_launch(cuda_kernels::residual_norm_forward(element_of(x.scalar_type()), args,
                                                   c10::cuda::getCurrentCUDAStream()),
               what, rows, width);
  return out;
}

kernels::ResidualNormGrads residual_norm_backward(const at::Tensor& grad_normalized,
                                                  const at::Tensor& grad_sum,
                                                  const at::Tensor& sum, const at::Tensor& mean,
                                                  const at::Tensor& rstd,
                                                  const at::Tensor& weight, bool rms) {
  const int64_t width = weight.numel();
  check_rows(sum, sum, width, "the norm's backward: the sum");
  check_rows(grad_normalized, sum, width, "the norm's backward: the gradient");
  check_rows(weight, sum, width, "the norm's backward: the weight");
  if (grad_sum.defined()) check_rows(grad_sum, sum, width, "the residual's gradient");
  ZERO_INTERNAL_ASSERT(grad_normalized.sizes() == sum.sizes() &&
                           (!grad_sum.defined() || grad_sum.sizes() == sum.sizes()),
                       "the norm's backward: gradients ", grad_normalized.sizes(), " for ",
                       sum.sizes());
  const int64_t rows = rows_of(sum, width);
  ZERO_INTERNAL_ASSERT(rstd.numel() == rows && rstd.scalar_type() == at::kFloat &&
                           rstd.device() == sum.device() && rstd.is_contiguous() &&
                           (rms || (mean.numel() == rows && mean.scalar_type() == at::kFloat &&
                                    mean.device() == sum.device() && mean.is_contiguous())),
                       "the norm's backward: statistics of ", rstd.numel(), " rows for ", rows);
  const c10::cuda::CUDAGuard guard(sum.device());
  const auto fp32 = sum.options().dtype(at::kFloat);
  const int64_t partials = cuda_kernels::column_partials(rows);
  at::Tensor grad_input = at::empty_like(sum);
  // No rows: no launch, and zero parameter gradients (as the CPU kernels').
  const auto parameter_gradient = [&] {
    return rows == 0 ? at::zeros_like(weight) : at::empty_like(weight);
  };
  at::Tensor grad_weight = parameter_gradient();
  at::Tensor grad_bias = rms ? at::Tensor() : parameter_gradient();
  at::Tensor weight_partials = at::empty({partials, width}, fp32);
  at::Tensor bias_partials = rms ? at::Tensor() : at::empty({partials, width}, fp32);
  cuda_kernels::NormBackward args{grad_normalized.const_data_ptr(),
                                  data_or_null(grad_sum),
                                  sum.const_data_ptr(),
                                  rms ? nullptr : mean.const_data_ptr<float>(),
                                  rstd.const_data_ptr<float>(),
                                  weight.const_data_ptr(),
                                  grad_input.mutable_data_ptr(),
                                  weight_partials.mutable_data_ptr<float>(),
                                  rms ? nullptr : bias_partials.mutable_data_ptr<float>(),
                                  grad_weight.mutable_data_ptr(),
                                  mutable_or_null(grad_bias),
                                  rows,
                                  width};
  check_launch(cuda_kernels::residual_norm_backward(element_of(sum.scalar_type()), args,
                                                    c10::cuda::getCurrentCUDAStream()),
               rms ? "residual_rms_norm_backward" : "residual_layer_norm_backward", rows, width);
  return {grad_input, grad_weight, grad_bias};
}

}  // namespace

const kernels::DeviceKernels& cuda_fused_kernels() {
  static const kernels::DeviceKernels table{&supported, &bias_gelu, &bias_gelu_backward,
                                            &residual_norm, &residual_norm_backward};
  return table;
}

}  // namespace zero

namespace {
// Registered when the library (or, linked statically, this object) is loaded: the engine
// library reaches the kernels only through kernels::cuda_kernels() (device_kernels.h).
[[maybe_unused]] const bool registered =
    (zero::kernels::register_cuda_kernels(&zero::cuda_fused_kernels()), true);
}  // namespace
