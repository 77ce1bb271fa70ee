// The Adagrad and Lion loops (optim/adagrad_lion.h). Compiled with -ffp-contract=off (see
// CMakeLists.txt), as shard_optimizer.cpp is: no path fuses a multiply-add the others do not.
#include "optim/adagrad_lion.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/parallel.h"
#include "common/simd_ops.h"
#include "optim/element_types.h"
#include "zero/error.h"

namespace zero {
namespace {

using optim_detail::check_operands;
using optim_detail::dispatch_types;
using optim_detail::kGrainSize;

// The scalar loops: the reference, and the tail of the vector loops.
template <typename Grad, typename Param>
[[gnu::always_inline]] inline void adagrad_kernel(float* master, const Grad* grad,
                                                  Param* param_out, float* sum, int64_t begin,
                                                  int64_t end, const AdagradScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float p = master[i];
    float g = static_cast<float>(grad[i]) * s.grad_multiplier;
    if (s.decay) g = g + s.weight_decay * p;
    const float total = sum[i] + g * g;
    sum[i] = total;
    const float denom = std::sqrt(total) + s.eps;
    p = p - s.step_size * (g / denom);
    master[i] = p;
    if constexpr (!std::is_same_v<Param, void>) param_out[i] = static_cast<Param>(p);
  }
}

// torch.sign: 1, -1, +0 for +-0, NaN for NaN.
[[gnu::always_inline]] inline float sign_of(float c) {
  return c > 0.0f ? 1.0f : c < 0.0f ? -1.0f : c == 0.0f ? 0.0f : c;
}

template <typename Grad, typename Param>
[[gnu::always_inline]] inline void lion_kernel(float* master, const Grad* grad, Param* param_out,
                                               float* m, int64_t begin, int64_t end,
                                               const LionScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    const float g = static_cast<float>(grad[i]) * s.grad_multiplier;
    const float mi = m[i];
    float p = master[i] * s.decay_factor;
    const float c = mi * s.beta1 + s.one_minus_beta1 * g;
    p = p - s.lr * sign_of(c);
    m[i] = mi * s.beta2 + s.one_minus_beta2 * g;
    master[i] = p;
    if constexpr (!std::is_same_v<Param, void>) param_out[i] = static_cast<Param>(p);
  }
}

#define ZERO_SIMD_LOOPS "optim/adagrad_lion_simd.h"
#include "common/simd_per_isa.h"
#undef ZERO_SIMD_LOOPS

template <typename Grad, typename Param>
void adagrad_loop(SimdLevel level, float* master, const Grad* grad, Param* out, float* sum,
                  int64_t begin, int64_t end, const AdagradScalars& s) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512: return avx512::adagrad_simd(master, grad, out, sum, begin, end, s);
    case SimdLevel::kAvx2: return avx2::adagrad_simd(master, grad, out, sum, begin, end, s);
#else
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
#endif
    case SimdLevel::kScalar: return adagrad_kernel(master, grad, out, sum, begin, end, s);
  }
}

template <typename Grad, typename Param>
void lion_loop(SimdLevel level, float* master, const Grad* grad, Param* out, float* m,
               int64_t begin, int64_t end, const LionScalars& s) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512: return avx512::lion_simd(master, grad, out, m, begin, end, s);
    case SimdLevel::kAvx2: return avx2::lion_simd(master, grad, out, m, begin, end, s);
#else
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
#endif
    case SimdLevel::kScalar: return lion_kernel(master, grad, out, m, begin, end, s);
  }
}

// A one-state loop over contiguous tensors: checks, then loop(master, grad, out, state, begin,
// end) with the operands' element types, split over libtorch's threads.
template <typename Loop>
void run_one_state_loop(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                        const at::Tensor& param_out, const at::Tensor& state, const char* what,
                        Loop&& loop) {
  ZERO_INTERNAL_ASSERT(static_cast<int>(level) <= static_cast<int>(simd_level()),
                       "SIMD level beyond this CPU's");
  ZERO_INTERNAL_ASSERT(master.scalar_type() == at::kFloat && state.scalar_type() == at::kFloat,
                       "master and state must be fp32");
  check_operands({&master, &grad, &param_out, &state}, master.numel(), what);
  float* master_ptr = master.data_ptr<float>();
  float* state_ptr = state.data_ptr<float>();
  dispatch_types(grad, param_out, [&](auto* g, auto* out) {
    parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
      loop(master_ptr, g, out, state_ptr, begin, end);
    });
  });
}

}  // namespace

AdagradScalars adagrad_scalars(const OptimizerConfig& config, int64_t step,
                               double grad_multiplier, double lr) {
  AdagradScalars s{};
  s.grad_multiplier = static_cast<float>(grad_multiplier);
  s.weight_decay = static_cast<float>(config.weight_decay);
  s.decay = config.weight_decay != 0.0;
  s.eps = static_cast<float>(config.eps);
  s.step_size =
      static_cast<float>(lr / (1.0 + static_cast<double>(step - 1) * config.lr_decay));
  return s;
}

LionScalars lion_scalars(const OptimizerConfig& config, double grad_multiplier, double lr) {
  LionScalars s{};
  s.grad_multiplier = static_cast<float>(grad_multiplier);
  s.decay_factor = static_cast<float>(1.0 - lr * config.weight_decay);
  s.beta1 = static_cast<float>(config.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  s.lr = static_cast<float>(lr);
  return s;
}

void adagrad_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                    const at::Tensor& param_out, const at::Tensor& sum, const AdagradScalars& s) {
  run_one_state_loop(level, master, grad, param_out, sum, "Adagrad",
                     [&](float* p, auto* g, auto* out, float* state, int64_t begin, int64_t end) {
                       adagrad_loop(level, p, g, out, state, begin, end, s);
                     });
}

void lion_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                 const at::Tensor& param_out, const at::Tensor& exp_avg, const LionScalars& s) {
  run_one_state_loop(level, master, grad, param_out, exp_avg, "Lion",
                     [&](float* p, auto* g, auto* out, float* state, int64_t begin, int64_t end) {
                       lion_loop(level, p, g, out, state, begin, end, s);
                     });
}

}  // namespace zero
