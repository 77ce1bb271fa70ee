// DeepSpeed's WarmupLR / WarmupDecayLR / WarmupCosineLR as pure functions of the step count
// (see include/zero/scheduler.h for the mapping onto DeepSpeed's scheduler.step() sequence).
// The arithmetic follows DeepSpeed's order of operations so that the values match its Python
// floats bit for bit.
#include "zero/scheduler.h"

#include <algorithm>
#include <cmath>

#include "zero/error.h"

namespace zero {

namespace {
constexpr double kPi = 3.141592653589793;  // Python's math.pi
}  // namespace

LRScheduler::LRScheduler(const SchedulerConfig& config, double base_lr)
    : config_(config),
      base_lr_(base_lr),
      warmup_steps_(config.effective_warmup_steps()),
      inverse_log_warmup_(1.0 / std::log(static_cast<double>(warmup_steps_))) {
  ZERO_CHECK(std::isfinite(base_lr) && base_lr >= 0.0,
             "LRScheduler: the optimizer's base lr must be a finite number >= 0 (got ", base_lr,
             ")");
  if (config.type != SchedulerType::kWarmupLR) {
    ZERO_CHECK(config.total_num_steps >= 1, "LRScheduler: total_num_steps must be >= 1 (got ",
               config.total_num_steps, ")");
  }
  if (config.type == SchedulerType::kWarmupCosineLR) {
    ZERO_CHECK(config.total_num_steps > warmup_steps_,
               "LRScheduler: WarmupCosineLR needs total_num_steps > the warmup length (got ",
               config.total_num_steps, " and ", warmup_steps_, ")");
  }
}

double LRScheduler::warmup_gamma(int64_t iteration) const {
  if (config_.warmup_type == WarmupType::kLog) {
    return inverse_log_warmup_ * std::log(static_cast<double>(iteration + 1));
  }
  return static_cast<double>(iteration) / static_cast<double>(warmup_steps_);
}

double LRScheduler::lr_after_iteration(int64_t iteration) const {
  ZERO_CHECK(iteration >= 0, "LRScheduler: iteration must be >= 0 (got ", iteration, ")");
  const int64_t warmup = warmup_steps_;
  const int64_t total = config_.total_num_steps;
  switch (config_.type) {
    case SchedulerType::kWarmupLR:
    case SchedulerType::kWarmupDecayLR: {
      double gamma = 1.0;
      if (iteration < warmup) {
        gamma = warmup_gamma(iteration);
      } else if (config_.type == SchedulerType::kWarmupDecayLR) {
        gamma = std::max(0.0, static_cast<double>(total - iteration) /
                                  std::max(1.0, static_cast<double>(total - warmup)));
      }
      const double delta = config_.warmup_max_lr - config_.warmup_min_lr;
      return config_.warmup_min_lr + delta * gamma;
    }
    case SchedulerType::kWarmupCosineLR: {
      double ratio = 0.0;
      if (iteration < warmup) {
        ratio = config_.warmup_min_ratio + warmup_gamma(iteration) * (1.0 - config_.warmup_min_ratio);
      } else {
        const double real_last_step = static_cast<double>(iteration - warmup + 1);
        const double real_total_steps = static_cast<double>(total - warmup);
        // Past the end of the cosine the ratio is held at cos_min_ratio (see scheduler.h).
        const double cosine =
            real_last_step > real_total_steps
                ? 0.0
                : (1.0 + std::cos(kPi * real_last_step / real_total_steps)) / 2.0;
        ratio = std::max(0.0, config_.cos_min_ratio + (1.0 - config_.cos_min_ratio) * cosine);
      }
      return base_lr_ * ratio;
    }
  }
  ZERO_INTERNAL_ASSERT(false, "unexpected scheduler type ", static_cast<int>(config_.type));
  return 0.0;
}

double LRScheduler::lr_at(int64_t applied_steps) const {
  ZERO_CHECK(applied_steps >= 0, "LRScheduler::lr_at: the number of applied optimizer steps must "
             "be >= 0 (got ", applied_steps, ")");
  if (applied_steps == 0) {
    // The value DeepSpeed's constructor writes into the optimizer (last_batch_iteration -1).
    return config_.type == SchedulerType::kWarmupCosineLR ? 0.0 : config_.warmup_min_lr;
  }
  return lr_after_iteration(applied_steps - 1);
}

std::unique_ptr<LRScheduler> make_scheduler(const Config& config) {
  if (!config.scheduler) return nullptr;
  return std::make_unique<LRScheduler>(*config.scheduler, config.optimizer.lr);
}

}  // namespace zero
