// Note [Fused element-wise kernels] (fused_kernels.h).
#include "kernels/fused_kernels.h"

#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <type_traits>

#include "common/parallel.h"
#include "common/simd_ops.h"
#include "kernels/fused_formulas.h"
#include "zero/error.h"

namespace zero::kernels {
namespace {

// Rows per unit of parallel work; the column sums keep one fp32 partial per block.
constexpr int64_t kRowsPerBlock = 32;
// The vector loops' constants (fused_kernels_simd.h): the formulas' own.
constexpr float kGeluK = formula::kGeluK;
constexpr float kGeluA = formula::kGeluA;

// The scalar forms. The vector loops (fused_kernels_simd.h) repeat them operation for
// operation and call them for each row's last width % lanes elements.

inline float gelu_sigmoid(float v) {
  const float e = simd::exp_reference(formula::gelu_exponent(v));
  return 1.0f / (1.0f + e);
}

template <typename T>
void bias_gelu_tail(const T* u, const T* bias, T* out, int64_t j, int64_t width) {
  for (; j < width; ++j) {
    const float v = static_cast<float>(u[j]) + static_cast<float>(bias[j]);
    out[j] = static_cast<T>(v * gelu_sigmoid(v));
  }
}

template <typename T>
void bias_gelu_backward_tail(const T* grad_out, const T* u, const T* bias, T* grad_u,
                             float* grad_bias_partial, int64_t j, int64_t width) {
  for (; j < width; ++j) {
    const float v = static_cast<float>(u[j]) + static_cast<float>(bias[j]);
    const float g =
        static_cast<float>(grad_out[j]) * formula::gelu_derivative(v, gelu_sigmoid(v));
    grad_u[j] = static_cast<T>(g);
    grad_bias_partial[j] = grad_bias_partial[j] + g;
  }
}

template <typename T>
void layer_norm_output_tail(const T* h, const T* weight, const T* bias, T* y, float mean,
                            float rstd, bool round_normalized, int64_t j, int64_t width) {
  for (; j < width; ++j) {
    float xhat = (static_cast<float>(h[j]) - mean) * rstd;
    if (round_normalized) xhat = static_cast<float>(static_cast<T>(xhat));
    const float scaled = xhat * static_cast<float>(weight[j]);
    y[j] = static_cast<T>(bias != nullptr ? scaled + static_cast<float>(bias[j]) : scaled);
  }
}

template <typename T>
void layer_norm_sums_tail(const T* grad_y, const T* h, const T* weight, float mean, float rstd,
                          float* grad_weight_partial, float* grad_bias_partial, int64_t j,
                          int64_t width, float& sum_dyw, float& sum_dyw_xhat) {
  for (; j < width; ++j) {
    const float dy = static_cast<float>(grad_y[j]);
    const float xhat = (static_cast<float>(h[j]) - mean) * rstd;
    const float dyw = dy * static_cast<float>(weight[j]);
    sum_dyw += dyw;
    sum_dyw_xhat += dyw * xhat;
    grad_weight_partial[j] = grad_weight_partial[j] + dy * xhat;
    if (grad_bias_partial != nullptr) grad_bias_partial[j] = grad_bias_partial[j] + dy;
  }
}

template <typename T>
void layer_norm_input_grad_tail(const T* grad_y, const T* grad_h, const T* h, const T* weight,
                                float mean, float rstd, float mean_dyw, float mean_dyw_xhat,
                                T* grad_input, int64_t j, int64_t width) {
  for (; j < width; ++j) {
    const float xhat = (static_cast<float>(h[j]) - mean) * rstd;
    const float dyw = static_cast<float>(grad_y[j]) * static_cast<float>(weight[j]);
    float dx = formula::norm_input_grad(dyw, xhat, rstd, mean_dyw, mean_dyw_xhat);
    if (grad_h != nullptr) dx = dx + static_cast<float>(grad_h[j]);
    grad_input[j] = static_cast<T>(dx);
  }
}

// The scalar level: the reference rows.
namespace scalar {

template <typename T>
void bias_gelu_rows(const T* u, const T* bias, T* out, int64_t row_begin, int64_t row_end,
                    int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    bias_gelu_tail(u + row * width, bias, out + row * width, 0, width);
  }
}

template <typename T>
void bias_gelu_backward_rows(const T* grad_out, const T* u, const T* bias, T* grad_u,
                             float* grad_bias_partial, int64_t row_begin, int64_t row_end,
                             int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    bias_gelu_backward_tail(grad_out + at, u + at, bias, grad_u + at, grad_bias_partial, 0, width);
  }
}

template <typename T>
void residual_layer_norm_rows(const T* x, const T* a, const T* weight, const T* bias, T* h, T* y,
                              float* mean_out, float* rstd_out, int64_t row_begin, int64_t row_end,
                              int64_t width, float eps, bool rms) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    const T* hr = a != nullptr ? h + at : x + at;
    float total = 0;
    for (int64_t k = 0; k < width; ++k) {
      if (a != nullptr) {
        h[at + k] = static_cast<T>(static_cast<float>(x[at + k]) + static_cast<float>(a[at + k]));
      }
      total += static_cast<float>(hr[k]);
    }
    const float mean = rms ? 0.0f : total / static_cast<float>(width);
    float square_total = 0;
    for (int64_t k = 0; k < width; ++k) {
      const float d = static_cast<float>(hr[k]) - mean;
      square_total += d * d;
    }
    const float rstd = 1.0f / std::sqrt(square_total / static_cast<float>(width) + eps);
    if (mean_out != nullptr) mean_out[row] = mean;
    rstd_out[row] = rstd;
    layer_norm_output_tail(hr, weight, bias, y + at, mean, rstd, rms, 0, width);
  }
}

template <typename T>
void residual_layer_norm_backward_rows(const T* grad_y, const T* grad_h, const T* h,
                                       const float* mean, const float* rstd, const T* weight,
                                       T* grad_input, float* grad_weight_partial,
                                       float* grad_bias_partial, int64_t row_begin,
                                       int64_t row_end, int64_t width) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t at = row * width;
    const float row_mean = mean != nullptr ? mean[row] : 0.0f;  // null: RMSNorm
    float s1 = 0, s2 = 0;
    layer_norm_sums_tail(grad_y + at, h + at, weight, row_mean, rstd[row], grad_weight_partial,
                         grad_bias_partial, 0, width, s1, s2);
    const float inv_width = 1.0f / static_cast<float>(width);
    layer_norm_input_grad_tail(grad_y + at, grad_h == nullptr ? nullptr : grad_h + at, h + at,
                               weight, row_mean, rstd[row],
                               mean != nullptr ? s1 * inv_width : 0.0f, s2 * inv_width,
                               grad_input + at, 0, width);
  }
}

}  // namespace scalar

#define ZERO_SIMD_LOOPS "kernels/fused_kernels_simd.h"
#include "common/simd_per_isa.h"
#undef ZERO_SIMD_LOOPS

#if defined(__x86_64__)

// The row loop NAME<T>(args...) of `level`.
#define ZERO_ROWS_AT_LEVEL(level, NAME, ...)                           \
  switch (level) {                                                     \
    case SimdLevel::kAvx512: avx512::NAME<T>(__VA_ARGS__); break;      \
    case SimdLevel::kAvx2: avx2::NAME<T>(__VA_ARGS__); break;          \
    case SimdLevel::kScalar: scalar::NAME<T>(__VA_ARGS__); break;      \
  }
#else
#define ZERO_ROWS_AT_LEVEL(level, NAME, ...) scalar::NAME<T>(__VA_ARGS__);
#endif

// fn(T{}) with T the element type of `dtype` (fp32, bf16, fp16).
template <typename Fn>
void with_element_type(at::ScalarType dtype, Fn&& fn) {
  switch (dtype) {
    case at::kFloat: fn(float{}); return;
    case at::kBFloat16: fn(c10::BFloat16{}); return;
    case at::kHalf: fn(c10::Half{}); return;
    default: break;
  }
  ZERO_INTERNAL_ASSERT(false, "fused kernels: unsupported dtype ", dtype);
}

// fn(block, first row, end row) for every block of kRowsPerBlock rows, over libtorch's threads.
void for_row_blocks(int64_t rows, int64_t width,
                    const std::function<void(int64_t, int64_t, int64_t)>& fn) {
  if (rows == 0 || width == 0) return;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // At least ~64K elements per thread's share before splitting.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kRowsPerBlock * width));
  parallel_ranges(at::empty({blocks}, at::kByte), grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      fn(b, b * kRowsPerBlock, std::min(rows, (b + 1) * kRowsPerBlock));
    }
  });
}

// The per-block fp32 partials [blocks, width] summed in block order (thread-count independent),
// in one loop: an ATen add per block cost a tenth of LayerNorm's backward at gpt2-mini's width.
at::Tensor sum_partials(const at::Tensor& partials) {
  const int64_t blocks = partials.size(0), width = partials.size(1);
  at::Tensor total = partials[0].clone();
  float* out = total.data_ptr<float>();
  const float* in = partials.data_ptr<float>();
  for (int64_t b = 1; b < blocks; ++b) {
    for (int64_t j = 0; j < width; ++j) out[j] += in[b * width + j];
  }
  return total;
}

void check_rows(const at::Tensor& t, int64_t width, at::ScalarType dtype, const char* what) {
  ZERO_INTERNAL_ASSERT(supported(t) && t.scalar_type() == dtype && t.dim() >= 1 &&
                           t.size(-1) == width,
                       "fused kernels: ", what, " must be a contiguous CPU ", dtype,
                       " tensor of last dimension ", width, ", got ", t.scalar_type(), " ",
                       t.sizes());
}

}  // namespace

bool supported(const at::Tensor& t) {
  return t.defined() && t.is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16 ||
          t.scalar_type() == at::kHalf);
}

at::Tensor bias_gelu(const at::Tensor& u, const at::Tensor& bias, SimdLevel level) {
  const int64_t width = bias.numel();
  check_rows(u, width, u.scalar_type(), "bias_gelu's input");
  check_rows(bias, width, u.scalar_type(), "bias_gelu's bias");
  at::Tensor out = at::empty_like(u);
  const int64_t rows = u.numel() / std::max<int64_t>(width, 1);
  with_element_type(u.scalar_type(), [&](auto element) {
    using T = decltype(element);
    const T* in = u.data_ptr<T>();
    const T* b = bias.data_ptr<T>();
    T* o = out.data_ptr<T>();
    for_row_blocks(rows, width, [&](int64_t, int64_t begin, int64_t end) {
      ZERO_ROWS_AT_LEVEL(level, bias_gelu_rows, in, b, o, begin, end, width)
    });
  });
  return out;
}

BiasGeluGrads bias_gelu_backward(const at::Tensor& grad_out, const at::Tensor& u,
                                 const at::Tensor& bias, SimdLevel level) {
  const int64_t width = bias.numel();
  check_rows(u, width, u.scalar_type(), "bias_gelu_backward's input");
  check_rows(grad_out, width, u.scalar_type(), "bias_gelu_backward's gradient");
  check_rows(bias, width, u.scalar_type(), "bias_gelu_backward's bias");
  ZERO_INTERNAL_ASSERT(grad_out.sizes() == u.sizes(), "bias_gelu_backward: gradient ",
                       grad_out.sizes(), " for input ", u.sizes());
  const int64_t rows = u.numel() / std::max<int64_t>(width, 1);
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock);
  at::Tensor grad_u = at::empty_like(u);
  at::Tensor partials = at::zeros({blocks, width}, u.options().dtype(at::kFloat));
  with_element_type(u.scalar_type(), [&](auto element) {
    using T = decltype(element);
    const T* g = grad_out.data_ptr<T>();
    const T* in = u.data_ptr<T>();
    const T* b = bias.data_ptr<T>();
    T* gu = grad_u.data_ptr<T>();
    float* partial = partials.data_ptr<float>();
    for_row_blocks(rows, width, [&](int64_t block, int64_t begin, int64_t end) {
      ZERO_ROWS_AT_LEVEL(level, bias_gelu_backward_rows, g, in, b, gu, partial + block * width,
                         begin, end, width)
    });
  });
  return {grad_u, sum_partials(partials).to(bias.scalar_type())};
}

namespace {

// residual_layer_norm and residual_rms_norm: `a` and `bias` may be undefined (rms only).
ResidualNorm residual_norm(const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight,
                           const at::Tensor& bias, double eps, bool rms, SimdLevel level) {
  const int64_t width = weight.numel();
  const at::ScalarType dtype = x.scalar_type();
  const char* what = rms ? "residual_rms_norm" : "residual_layer_norm";
  check_rows(x, width, dtype, what);
  check_rows(weight, width, dtype, what);
  if (a.defined()) check_rows(a, width, dtype, what);
  if (bias.defined()) check_rows(bias, width, dtype, what);
  ZERO_INTERNAL_ASSERT((!a.defined() || x.sizes() == a.sizes()) && eps > 0 &&
                           (rms || (a.defined() && bias.defined())),
                       what, ": ", x.sizes(), " + ", a.defined() ? a.sizes() : x.sizes(),
                       ", eps ", eps);
  const int64_t rows = x.numel() / std::max<int64_t>(width, 1);
  const auto fp32 = x.options().dtype(at::kFloat);
  ResidualNorm out{a.defined() ? at::empty_like(x) : x, at::empty_like(x),
                   rms ? at::Tensor() : at::empty({rows}, fp32), at::empty({rows}, fp32)};
  with_element_type(dtype, [&](auto element) {
    using T = decltype(element);
    const T* xs = x.data_ptr<T>();
    const T* as = a.defined() ? a.data_ptr<T>() : nullptr;
    const T* w = weight.data_ptr<T>();
    const T* b = bias.defined() ? bias.data_ptr<T>() : nullptr;
    T* h = a.defined() ? out.sum.data_ptr<T>() : nullptr;
    T* y = out.normalized.data_ptr<T>();
    float* mean = rms ? nullptr : out.mean.data_ptr<float>();
    float* rstd = out.rstd.data_ptr<float>();
    const float e = static_cast<float>(eps);
    for_row_blocks(rows, width, [&](int64_t, int64_t begin, int64_t end) {
      ZERO_ROWS_AT_LEVEL(level, residual_layer_norm_rows, xs, as, w, b, h, y, mean, rstd, begin,
                         end, width, e, rms)
    });
  });
  return out;
}

ResidualNormGrads residual_norm_backward(const at::Tensor& grad_normalized,
                                         const at::Tensor& grad_sum, const at::Tensor& sum,
                                         const at::Tensor& mean, const at::Tensor& rstd,
                                         const at::Tensor& weight, bool rms, SimdLevel level) {
  const int64_t width = weight.numel();
  const at::ScalarType dtype = sum.scalar_type();
  check_rows(sum, width, dtype, "the norm's backward: the sum");
  check_rows(grad_normalized, width, dtype, "the norm's backward: the gradient");
  check_rows(weight, width, dtype, "the norm's backward: the weight");
  if (grad_sum.defined()) check_rows(grad_sum, width, dtype, "the residual's gradient");
  const int64_t rows = sum.numel() / std::max<int64_t>(width, 1);
  ZERO_INTERNAL_ASSERT(rstd.numel() == rows && rstd.scalar_type() == at::kFloat &&
                           (rms || (mean.numel() == rows && mean.scalar_type() == at::kFloat)),
                       "the norm's backward: statistics of ", rstd.numel(), " rows for ", rows);
  const int64_t blocks = std::max<int64_t>(1, (rows + kRowsPerBlock - 1) / kRowsPerBlock);
  at::Tensor grad_input = at::empty_like(sum);
  const auto fp32 = sum.options().dtype(at::kFloat);
  at::Tensor weight_partials = at::zeros({blocks, width}, fp32);
  at::Tensor bias_partials = rms ? at::Tensor() : at::zeros({blocks, width}, fp32);
  with_element_type(dtype, [&](auto element) {
    using T = decltype(element);
    const T* dy = grad_normalized.data_ptr<T>();
    const T* dh = grad_sum.defined() ? grad_sum.data_ptr<T>() : nullptr;
    const T* h = sum.data_ptr<T>();
    const float* m = rms ? nullptr : mean.data_ptr<float>();
    const float* r = rstd.data_ptr<float>();
    const T* w = weight.data_ptr<T>();
    T* gi = grad_input.data_ptr<T>();
    float* gw = weight_partials.data_ptr<float>();
    float* gb = rms ? nullptr : bias_partials.data_ptr<float>();
    for_row_blocks(rows, width, [&](int64_t block, int64_t begin, int64_t end) {
      ZERO_ROWS_AT_LEVEL(level, residual_layer_norm_backward_rows, dy, dh, h, m, r, w, gi,
                         gw + block * width, gb == nullptr ? nullptr : gb + block * width, begin,
                         end, width)
    });
  });
  return {grad_input, sum_partials(weight_partials).to(weight.scalar_type()),
          rms ? at::Tensor() : sum_partials(bias_partials).to(weight.scalar_type())};
}

}  // namespace

ResidualNorm residual_layer_norm(const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight,
                                 const at::Tensor& bias, double eps, SimdLevel level) {
  return residual_norm(x, a, weight, bias, eps, /*rms=*/false, level);
}

ResidualNorm residual_rms_norm(const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight,
                               double eps, SimdLevel level) {
  return residual_norm(x, a, weight, at::Tensor(), eps, /*rms=*/true, level);
}

ResidualNormGrads residual_layer_norm_backward(const at::Tensor& grad_normalized,
                                               const at::Tensor& grad_sum, const at::Tensor& sum,
                                               const at::Tensor& mean, const at::Tensor& rstd,
                                               const at::Tensor& weight, SimdLevel level) {
  return residual_norm_backward(grad_normalized, grad_sum, sum, mean, rstd, weight,
                                /*rms=*/false, level);
}

ResidualNormGrads residual_rms_norm_backward(const at::Tensor& grad_normalized,
                                             const at::Tensor& grad_sum, const at::Tensor& sum,
                                             const at::Tensor& rstd, const at::Tensor& weight,
                                             SimdLevel level) {
  return residual_norm_backward(grad_normalized, grad_sum, sum, at::Tensor(), rstd, weight,
                                /*rms=*/true, level);
}

}  // namespace zero::kernels
