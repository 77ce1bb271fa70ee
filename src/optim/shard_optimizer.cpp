#include "optim/shard_optimizer.h"

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/parallel.h"
#include "common/simd_level.h"
#include "common/simd_ops.h"
#include "optim/adagrad_lion.h"
#include "optim/adam_kernels.h"
#include "optim/device_update.h"
#include "optim/element_types.h"
#include "optim/optimizer_state.h"
#include "optim/prefetch.h"
#include "zero/error.h"

namespace zero {
namespace {

using optim_detail::dispatch_types;
using optim_detail::kGrainSize;

// The scalar loops are written once, force-inlined into per-ISA wrappers (*_loop_* below) so
// the compiler vectorizes each for its instruction set; the ISA is picked once per process.
// Adam's AVX2 and AVX-512 levels use the hand-vectorized loop of adam_kernels_simd.h instead
// (auto-vectorized, it ran at one core's memory bandwidth less 10 %), with this scalar loop for
// the tail; the scalar level is the reference. Results are identical across ISAs because this
// file is compiled with -ffp-contract=off (see CMakeLists.txt): no path fuses a multiply-add
// the others do not, and sqrt/div are exact.
template <typename Grad, typename Param>
[[gnu::always_inline]] inline void adam_kernel(float* master, const Grad* grad, Param* param_out, float* m, float* v,
                 int64_t begin, int64_t end, const AdamScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float p = master[i];
    float g = static_cast<float>(grad[i]) * s.grad_multiplier;
    p = p * s.decay_factor;
    g = g + s.l2 * p;
    const float mi = m[i] * s.beta1 + s.one_minus_beta1 * g;
    const float vi = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
    p = p - s.step_size * (mi / denom);
    master[i] = p;
    if constexpr (!std::is_same_v<Param, void>) param_out[i] = static_cast<Param>(p);
  }
}

struct SgdScalars {
  float grad_multiplier, weight_decay, momentum, one_minus_dampening, lr;
  bool nesterov, first_step, use_momentum;
};

template <typename Grad, typename Param>
[[gnu::always_inline]] inline void sgd_kernel(float* master, const Grad* grad, Param* param_out, float* buf, int64_t begin,
                int64_t end, const SgdScalars& s) {
  for (int64_t i = begin; i < end; ++i) {
    float p = master[i];
    float d = static_cast<float>(grad[i]) * s.grad_multiplier + s.weight_decay * p;
    if (s.use_momentum) {
      const float b = s.first_step ? d : buf[i] * s.momentum + s.one_minus_dampening * d;
      buf[i] = b;
      d = s.nesterov ? d + s.momentum * b : b;
    }
    p = p - s.lr * d;
    master[i] = p;
    if constexpr (!std::is_same_v<Param, void>) param_out[i] = static_cast<Param>(p);
  }
}

// The scalar level of Adam: the reference, and the tail of the vector loops.
template <typename Grad, typename Param>
void adam_loop_baseline(float* master, const Grad* grad, Param* out, float* m, float* v,
                        int64_t begin, int64_t end, const AdamScalars& s) {
  adam_kernel(master, grad, out, m, v, begin, end, s);
}

#define ZERO_DEFINE_LOOPS(SUFFIX, ATTRIBUTE)                                                   \
  template <typename Grad, typename Param>                                                     \
  ATTRIBUTE void sgd_loop_##SUFFIX(float* master, const Grad* grad, Param* out, float* buf,    \
                                   int64_t begin, int64_t end, const SgdScalars& s) {          \
    sgd_kernel(master, grad, out, buf, begin, end, s);                                         \
  }
ZERO_FOR_EACH_SIMD_LEVEL(ZERO_DEFINE_LOOPS)
#undef ZERO_DEFINE_LOOPS

#define ZERO_SIMD_LOOPS "optim/adam_kernels_simd.h"
#include "common/simd_per_isa.h"
#undef ZERO_SIMD_LOOPS

using optim_detail::software_prefetch;

template <typename Grad, typename Param>
void adam_loop(SimdLevel level, float* master, const Grad* grad, Param* out, float* m, float* v,
               int64_t begin, int64_t end, const AdamScalars& s) {
  switch (level) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512:
      return software_prefetch()
                 ? avx512::adam_simd<true>(master, grad, out, m, v, begin, end, s)
                 : avx512::adam_simd<false>(master, grad, out, m, v, begin, end, s);
    case SimdLevel::kAvx2:
      return software_prefetch()
                 ? avx2::adam_simd<true>(master, grad, out, m, v, begin, end, s)
                 : avx2::adam_simd<false>(master, grad, out, m, v, begin, end, s);
#else
    case SimdLevel::kAvx512:
    case SimdLevel::kAvx2:
#endif
    case SimdLevel::kScalar: return adam_loop_baseline(master, grad, out, m, v, begin, end, s);
  }
}

template <typename Grad, typename Param>
void sgd_loop(float* master, const Grad* grad, Param* out, float* buf, int64_t begin,
              int64_t end, const SgdScalars& s) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return sgd_loop_avx512(master, grad, out, buf, begin, end, s);
    case SimdLevel::kAvx2: return sgd_loop_avx2(master, grad, out, buf, begin, end, s);
    case SimdLevel::kScalar: return sgd_loop_baseline(master, grad, out, buf, begin, end, s);
  }
}

}  // namespace

std::vector<std::string> ShardOptimizer::moment_names() const {
  return optimizer_state_names(config_);
}

GradMultiplier::GradMultiplier(at::Tensor computed) : computed_(std::move(computed)) {
  ZERO_INTERNAL_ASSERT(computed_.defined() && computed_.numel() == 1 &&
                           computed_.scalar_type() == at::kDouble,
                       "a gradient multiplier is one fp64 element");
  factor_ = computed_.reshape({}).to(at::kFloat);
}

double GradMultiplier::value() const { return is_tensor() ? computed_.item<double>() : host_; }

const at::Tensor& GradMultiplier::factor() const {
  ZERO_INTERNAL_ASSERT(is_tensor(), "factor() of a plain multiplier");
  return factor_;
}

void ShardOptimizer::update(const at::Tensor& master, const at::Tensor& grad,
                            const at::Tensor& param_out, const std::vector<at::Tensor>& moments,
                            const GradMultiplier& multiplier, double lr) {
  const int64_t numel = master.numel();
  auto check = [&](const at::Tensor& t, const char* what) {
    ZERO_INTERNAL_ASSERT(t.is_contiguous() && t.numel() == numel, what,
                         " must be contiguous with ", numel, " elements");
  };
  ZERO_INTERNAL_ASSERT(master.scalar_type() == at::kFloat, "master must be fp32");
  check(master, "master");
  check(grad, "gradient");
  if (param_out.defined()) check(param_out, "parameter copy");
  ZERO_INTERNAL_ASSERT(moments.size() == moment_names().size(), "optimizer given ",
                       moments.size(), " moments, expected ", moment_names().size());
  for (const at::Tensor& m : moments) {
    ZERO_INTERNAL_ASSERT(m.scalar_type() == at::kFloat, "moments must be fp32");
    check(m, "moment");
  }
  ZERO_INTERNAL_ASSERT(step_count_ > 0, "update before begin_step");
  ZERO_INTERNAL_ASSERT(config_.type != OptimizerType::kLamb,
                       "LAMB steps through ShardState (its norms need every rank)");
  if (!master.device().is_cpu()) {
    fused_device_update(config_, step_count_, master, grad, param_out, moments, multiplier, lr);
    return;
  }
  const double grad_multiplier = multiplier.value();
  float* master_ptr = master.data_ptr<float>();

  if (config_.type == OptimizerType::kSGD) {
    SgdScalars s{};
    s.grad_multiplier = static_cast<float>(grad_multiplier);
    s.weight_decay = static_cast<float>(config_.weight_decay);
    s.momentum = static_cast<float>(config_.momentum);
    s.one_minus_dampening = static_cast<float>(1.0 - config_.dampening);
    s.lr = static_cast<float>(lr);
    s.nesterov = config_.nesterov;
    s.first_step = step_count_ == 1;
    s.use_momentum = config_.momentum != 0.0;
    float* buf = moments.empty() ? nullptr : moments[0].data_ptr<float>();
    dispatch_types(grad, param_out, [&](auto* g, auto* out) {
      parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
        sgd_loop(master_ptr, g, out, buf, begin, end, s);
      });
    });
    return;
  }
  switch (config_.type) {
    case OptimizerType::kAdagrad:
      return adagrad_update(simd_level(), master, grad, param_out, moments[0],
                            adagrad_scalars(config_, step_count_, grad_multiplier, lr));
    case OptimizerType::kLion:
      return lion_update(simd_level(), master, grad, param_out, moments[0],
                         lion_scalars(config_, grad_multiplier, lr));
    default:
      return adam_update(simd_level(), master, grad, param_out, moments[0], moments[1],
                         adam_scalars(config_, step_count_, grad_multiplier, lr));
  }
}

AdamScalars adam_scalars(const OptimizerConfig& config, int64_t step, double grad_multiplier,
                         double lr) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = config.bias_correction ? 1.0 - std::pow(config.beta1, t) : 1.0;
  const double bias_correction2 = config.bias_correction ? 1.0 - std::pow(config.beta2, t) : 1.0;
  const bool decoupled = config.type == OptimizerType::kAdamW;
  AdamScalars s{};
  s.grad_multiplier = static_cast<float>(grad_multiplier);
  s.decay_factor = decoupled ? static_cast<float>(1.0 - lr * config.weight_decay) : 1.0f;
  s.l2 = decoupled ? 0.0f : static_cast<float>(config.weight_decay);
  s.beta1 = static_cast<float>(config.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - config.beta1);
  s.beta2 = static_cast<float>(config.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - config.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(config.eps);
  s.step_size = static_cast<float>(lr / bias_correction1);
  return s;
}

void adam_update(SimdLevel level, const at::Tensor& master, const at::Tensor& grad,
                 const at::Tensor& param_out, const at::Tensor& exp_avg,
                 const at::Tensor& exp_avg_sq, const AdamScalars& s) {
  ZERO_INTERNAL_ASSERT(static_cast<int>(level) <= static_cast<int>(simd_level()),
                       "SIMD level beyond this CPU's");
  optim_detail::check_operands({&master, &grad, &exp_avg, &exp_avg_sq, &param_out},
                               master.numel(), "Adam");
  ZERO_INTERNAL_ASSERT(master.scalar_type() == at::kFloat &&
                           exp_avg.scalar_type() == at::kFloat &&
                           exp_avg_sq.scalar_type() == at::kFloat,
                       "master and moments must be fp32");
  float* master_ptr = master.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  dispatch_types(grad, param_out, [&](auto* g, auto* out) {
    parallel_ranges(master, kGrainSize, [&](int64_t begin, int64_t end) {
      adam_loop(level, master_ptr, g, out, m, v, begin, end, s);
    });
  });
}

}  // namespace zero
