// Learning-rate schedules: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py), configured by the `scheduler` section (zero/config.h).
//
// Usage in a training loop (the engine does this):
//
//   std::unique_ptr<zero::LRScheduler> scheduler = zero::make_scheduler(config);
//   int64_t applied = 0;  // optimizer steps applied so far (fp16-skipped steps not counted)
//   for (...) {
//     if (scheduler) optimizer_lr = scheduler->lr_at(applied);
//     bool skipped = optimizer_step(optimizer_lr);  // fp16 overflow: no update
//     if (!skipped) ++applied;
//   }
//
// lr_at() is a pure function of the number of applied steps, so resuming from a checkpoint only
// needs that count.
//
// ## How this maps onto DeepSpeed's sequence
//
// DeepSpeed's schedulers keep `last_batch_iteration` (i), starting at -1. The constructor writes
// get_lr() at i = -1 into the optimizer; the engine then calls scheduler.step() (i += 1, write
// get_lr(i)) AFTER each optimizer step that was applied, and not after a step skipped for an fp16
// overflow (engine._take_model_step). So the (k+1)-th applied optimizer step, k = applied steps
// before it, runs with:
//
//   k == 0:  the constructor's value: WarmupLR / WarmupDecayLR: warmup_min_lr (get_lr() returns
//            min_lrs before the start); WarmupCosineLR: 0.0 (get_lr() returns 0 before the start,
//            whatever warmup_min_ratio is).
//   k >= 1:  get_lr() at i = k - 1.
//
// With the defaults (warmup_min_lr 0, warmup_min_ratio 0) the first step therefore has LR 0, and
// for WarmupLR / WarmupDecayLR the first two steps both use warmup_min_lr (gamma(0) = 0).
//
// get_lr() at i >= 0, with N = max(2, warmup_num_steps) and T = total_num_steps:
//   gamma_warmup(i) = ln(i + 1) / ln(N)  (log)  or  i / N  (linear),   for i < N
//   WarmupLR:       lr = min + (max - min) * (i < N ? gamma_warmup(i) : 1)
//   WarmupDecayLR:  lr = min + (max - min) * (i < N ? gamma_warmup(i)
//                                                    : max(0, (T - i) / max(1, T - N)))
//   WarmupCosineLR: lr = base_lr * ratio, base_lr = optimizer.params.lr,
//                   ratio = r0 + (1 - r0) * gamma_warmup(i)                       for i < N
//                   ratio = max(0, c + (1 - c) * (1 + cos(pi * p)) / 2), p = (i - N + 1) / (T - N)
//                   with r0 = warmup_min_ratio, c = cos_min_ratio.
// Past the end of the cosine (p > 1) zero holds p at 1, so the ratio stays at cos_min_ratio, as
// current DeepSpeed does; DeepSpeed 0.16.5 let p grow, so its LR rose again along the cosine
// after total_num_steps. lr_at(k) agrees with DeepSpeed 0.16.5 for every k <= total_num_steps
// (the first total_num_steps + 1 updates).
#pragma once

#include "zero/export.h"

#include <cstdint>
#include <memory>

#include "zero/config.h"

namespace zero {

class ZERO_API LRScheduler {
 public:
  /// `base_lr` is the optimizer's configured learning rate (optimizer.params.lr); only
  /// WarmupCosineLR uses it (WarmupLR / WarmupDecayLR set absolute learning rates).
  LRScheduler(const SchedulerConfig& config, double base_lr);

  /// The learning rate for the next optimizer step, given the number of optimizer steps already
  /// applied (0 before the first update; steps skipped for an fp16 overflow are not counted).
  /// Throws zero::Error for a negative count.
  double lr_at(int64_t applied_steps) const;

  /// DeepSpeed's get_lr() once last_batch_iteration == `iteration` (>= 0), i.e. after
  /// `iteration + 1` calls of scheduler.step(). lr_at(k) == lr_after_iteration(k - 1) for k >= 1.
  double lr_after_iteration(int64_t iteration) const;

  const SchedulerConfig& config() const { return config_; }
  double base_lr() const { return base_lr_; }

 private:
  double warmup_gamma(int64_t iteration) const;  // iteration < warmup length

  SchedulerConfig config_;
  double base_lr_;
  int64_t warmup_steps_;       // max(2, warmup_num_steps)
  double inverse_log_warmup_;  // 1 / ln(warmup_steps_)
};

/// The configured schedule with the optimizer's lr as base; nullptr when config.scheduler is
/// unset (the LR stays optimizer.params.lr).
ZERO_API std::unique_ptr<LRScheduler> make_scheduler(const Config& config);

}  // namespace zero
