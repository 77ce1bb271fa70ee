// LAMB's loops (optim/lamb.h). Compiled with -ffp-contract=off (see CMakeLists.txt): the
// scalar loops below are vectorized per instruction set by the compiler (ZERO_DEFINE_LOOPS),
// every level with the scalar loop's rounding.
#include "optim/lamb.h"

#include <cmath>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "common/parallel.h"
#include "common/simd_level.h"
#include "common/simd_ops.h"
#include "optim/element_types.h"
#include "zero/error.h"

namespace zero {
namespace {

using optim_detail::check_operands;
using optim_detail::dispatch_types;
using optim_detail::kGrainSize;

[[gnu::always_inline]] inline float lamb_update_of(float p, float m, float v,
                                                   const LambScalars& s) {
  const float m_hat = m / s.bias_correction1;
  const float v_hat = v / s.bias_correction2;
  const float denom = s.eps_inside_sqrt ? std::sqrt(v_hat + s.eps) : std::sqrt(v_hat) + s.eps;
  return m_hat / denom + s.weight_decay * p;
}

template <typename Grad>
[[gnu::always_inline]] inline void moments_kernel(const Grad* grad, float* m, float* v,
                                                  int64_t begin, int64_t end,
                                                  const LambScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = static_cast<float>(grad[i]) * s.grad_multiplier;
    m[i] = m[i] * s.beta1 + s.one_minus_beta1 * g;
    v[i] = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
  }
}

template <typename Param>
[[gnu::always_inline]] inline void apply_kernel(float* master, const float* m, const float* v,
                                                Param* out, int64_t begin, int64_t end,
                                                const LambScalars& s, float step_size) {
  for (int64_t i = begin; i < end; ++i) {
    const float p = master[i] - step_size * lamb_update_of(master[i], m[i], v[i], s);
    master[i] = p;
    if constexpr (!std::is_same_v<Param, void>) out[i] = static_cast<Param>(p);
  }
}

#define ZERO_DEFINE_LOOPS(SUFFIX, ATTRIBUTE)                                                   \
  template <typename Grad>                                                                     \
  ATTRIBUTE void moments_loop_##SUFFIX(const Grad* grad, float* m, float* v, int64_t begin,    \
                                       int64_t end, const LambScalars& s) {                    \
    moments_kernel(grad, m, v, begin, end, s);                                                 \
  }                                                                                            \
  template <typename Param>                                                                    \
  ATTRIBUTE void apply_loop_##SUFFIX(float* master, const float* m, const float* v,           \
                                     Param* out, int64_t begin, int64_t end,                   \
                                     const LambScalars& s, float step_size) {                  \
    apply_kernel(master, m, v, out, begin, end, s, step_size);                                 \
  }
ZERO_FOR_EACH_SIMD_LEVEL(ZERO_DEFINE_LOOPS)
#undef ZERO_DEFINE_LOOPS

}  // namespace

LambScalars lamb_scalars(const OptimizerConfig& config, int64_t step, double grad_multiplier) {
  const double t = static_cast<double>(step);
  LambScalars s{};
  s.grad_multiplier = static_cast<float>(grad_multiplier);
  s.beta1 = static_cast<float>(config.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  s.bias_correction1 =
      static_cast<float>(config.bias_correction ? 1.0 - std::pow(config.beta1, t) : 1.0);
  s.bias_correction2 =
      static_cast<float>(config.bias_correction ? 1.0 - std::pow(config.beta2, t) : 1.0);
  s.eps = static_cast<float>(config.eps);
  s.weight_decay = static_cast<float>(config.weight_decay);
  s.eps_inside_sqrt = config.eps_inside_sqrt;
  return s;
}

void lamb_moments(const at::Tensor& grad, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  const LambScalars& s) {
  check_operands({&grad, &exp_avg, &exp_avg_sq}, exp_avg.numel(), "LAMB");
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  dispatch_types(grad, at::Tensor(), [&](auto* g, auto*) {
    parallel_ranges(exp_avg, kGrainSize, [&](int64_t begin, int64_t end) {
      switch (simd_level()) {
        case SimdLevel::kAvx512: return moments_loop_avx512(g, m, v, begin, end, s);
        case SimdLevel::kAvx2: return moments_loop_avx2(g, m, v, begin, end, s);
        case SimdLevel::kScalar: return moments_loop_baseline(g, m, v, begin, end, s);
      }
    });
  });
}

void lamb_norms(const at::Tensor& master, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                const LambScalars& s, ExactSquares& weights, ExactSquares& updates) {
  check_operands({&master, &exp_avg, &exp_avg_sq}, master.numel(), "LAMB");
  const float* p = master.data_ptr<float>();
  const float* m = exp_avg.data_ptr<float>();
  const float* v = exp_avg_sq.data_ptr<float>();
  // Exact sums: any split over threads, merged in any order, gives the same buckets.
  std::mutex merge;
  parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
    ExactSquares w, u;
    for (int64_t i = begin; i < end; ++i) {
      w.add(p[i]);
      u.add(lamb_update_of(p[i], m[i], v[i], s));
    }
    std::lock_guard<std::mutex> lock(merge);
    weights.merge(w);
    updates.merge(u);
  });
}

double lamb_trust_ratio(double weight_squares, double update_squares,
                        const OptimizerConfig& config) {
  const double w = std::sqrt(weight_squares);
  const double u = std::sqrt(update_squares);
  if (!(w > 0.0 && u > 0.0)) return (std::isnan(w) || std::isnan(u)) ? std::nan("") : 1.0;
  return std::min(std::max(w / u, config.min_coeff), config.max_coeff);
}

void lamb_apply(const at::Tensor& master, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                const at::Tensor& param_out, const LambScalars& s, double step_size) {
  check_operands({&master, &exp_avg, &exp_avg_sq, &param_out}, master.numel(), "LAMB");
  float* p = master.data_ptr<float>();
  const float* m = exp_avg.data_ptr<float>();
  const float* v = exp_avg_sq.data_ptr<float>();
  const auto step = static_cast<float>(step_size);
  // The gradient's dtype is not read here: the master stands in for dispatch_types' gradient.
  dispatch_types(master, param_out, [&](auto*, auto* out) {
    parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
      switch (simd_level()) {
        case SimdLevel::kAvx512: return apply_loop_avx512(p, m, v, out, begin, end, s, step);
        case SimdLevel::kAvx2: return apply_loop_avx2(p, m, v, out, begin, end, s, step);
        case SimdLevel::kScalar: return apply_loop_baseline(p, m, v, out, begin, end, s, step);
      }
    });
  });
}

}  // namespace zero
