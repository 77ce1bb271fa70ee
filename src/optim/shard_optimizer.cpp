#include "optim/shard_optimizer.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>

#include "common/simd_level.h"
#include "zero/error.h"

namespace zero {
namespace {

// Elements per parallel task: large enough to amortize scheduling, small enough to balance.
constexpr int64_t kGrainSize = 32768;

// Scalars of one update, folded once per step (torch computes these in double and applies
// them as float, which is what we do too).
struct AdamScalars {
  float grad_multiplier;
  float decay_factor;      // AdamW: 1 - lr * wd
  float l2;                // Adam: wd added to the gradient
  float beta1, one_minus_beta1, beta2, one_minus_beta2;
  float bias_correction2_sqrt;
  float eps;
  float step_size;         // lr / bias_correction1
};

// The loops are written once, force-inlined into per-ISA wrappers (adam_loop_* below) so the
// compiler vectorizes each for its instruction set; the ISA is picked once per process. Results
// are identical across ISAs because this file is compiled with -ffp-contract=off (see
// CMakeLists.txt): no path fuses a multiply-add the others do not, and sqrt/div are exact.
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

#define ZERO_DEFINE_LOOPS(SUFFIX, ATTRIBUTE)                                                   \
  template <typename Grad, typename Param>                                                     \
  ATTRIBUTE void adam_loop_##SUFFIX(float* master, const Grad* grad, Param* out, float* m,     \
                                    float* v, int64_t begin, int64_t end,                      \
                                    const AdamScalars& s) {                                    \
    adam_kernel(master, grad, out, m, v, begin, end, s);                                       \
  }                                                                                            \
  template <typename Grad, typename Param>                                                     \
  ATTRIBUTE void sgd_loop_##SUFFIX(float* master, const Grad* grad, Param* out, float* buf,    \
                                   int64_t begin, int64_t end, const SgdScalars& s) {          \
    sgd_kernel(master, grad, out, buf, begin, end, s);                                         \
  }
ZERO_DEFINE_LOOPS(baseline, )
ZERO_DEFINE_LOOPS(avx2, __attribute__((target("avx2,f16c"))))
ZERO_DEFINE_LOOPS(avx512, __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"))))
#undef ZERO_DEFINE_LOOPS

template <typename Grad, typename Param>
void adam_loop(float* master, const Grad* grad, Param* out, float* m, float* v, int64_t begin,
               int64_t end, const AdamScalars& s) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return adam_loop_avx512(master, grad, out, m, v, begin, end, s);
    case SimdLevel::kAvx2: return adam_loop_avx2(master, grad, out, m, v, begin, end, s);
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

// Calls fn(grad_ptr, param_out_ptr) with the concrete element types.
template <typename Fn>
void dispatch_types(const at::Tensor& grad, const at::Tensor& param_out, Fn&& fn) {
  auto with_param = [&](auto* g) {
    if (!param_out.defined()) {
      fn(g, static_cast<void*>(nullptr));
    } else if (param_out.scalar_type() == at::kBFloat16) {
      fn(g, param_out.data_ptr<c10::BFloat16>());
    } else if (param_out.scalar_type() == at::kHalf) {
      fn(g, param_out.data_ptr<c10::Half>());
    } else {
      ZERO_INTERNAL_ASSERT(false, "unsupported parameter dtype ", param_out.scalar_type());
    }
  };
  switch (grad.scalar_type()) {
    case at::kFloat: with_param(grad.data_ptr<float>()); break;
    case at::kBFloat16: with_param(grad.data_ptr<c10::BFloat16>()); break;
    case at::kHalf: with_param(grad.data_ptr<c10::Half>()); break;
    default: ZERO_INTERNAL_ASSERT(false, "unsupported gradient dtype ", grad.scalar_type());
  }
}

}  // namespace

std::vector<std::string> ShardOptimizer::moment_names() const {
  if (config_.type != OptimizerType::kSGD) return {"exp_avg", "exp_avg_sq"};
  if (config_.momentum != 0.0) return {"exp_avg"};
  return {};
}

void ShardOptimizer::update(const at::Tensor& master, const at::Tensor& grad,
                            const at::Tensor& param_out, const std::vector<at::Tensor>& moments,
                            double grad_multiplier, double lr) {
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
      at::parallel_for(0, numel, kGrainSize, [&](int64_t begin, int64_t end) {
        sgd_loop(master_ptr, g, out, buf, begin, end, s);
      });
    });
    return;
  }

  const double t = static_cast<double>(step_count_);
  const double bias_correction1 = config_.bias_correction ? 1.0 - std::pow(config_.beta1, t) : 1.0;
  const double bias_correction2 = config_.bias_correction ? 1.0 - std::pow(config_.beta2, t) : 1.0;
  const bool decoupled = config_.type == OptimizerType::kAdamW;
  AdamScalars s{};
  s.grad_multiplier = static_cast<float>(grad_multiplier);
  s.decay_factor = decoupled ? static_cast<float>(1.0 - lr * config_.weight_decay) : 1.0f;
  s.l2 = decoupled ? 0.0f : static_cast<float>(config_.weight_decay);
  s.beta1 = static_cast<float>(config_.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - config_.beta1);
  s.beta2 = static_cast<float>(config_.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - config_.beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.eps = static_cast<float>(config_.eps);
  s.step_size = static_cast<float>(lr / bias_correction1);
  float* m = moments[0].data_ptr<float>();
  float* v = moments[1].data_ptr<float>();
  dispatch_types(grad, param_out, [&](auto* g, auto* out) {
    at::parallel_for(0, numel, kGrainSize, [&](int64_t begin, int64_t end) {
      adam_loop(master_ptr, g, out, m, v, begin, end, s);
    });
  });
}

}  // namespace zero
