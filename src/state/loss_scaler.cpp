#include "state/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "zero/error.h"

namespace zero {

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled) {
  if (!enabled) return;  // scale stays 1, never changes
  if (!config.dynamic) {
    scale_ = config.static_scale;
    return;
  }
  dynamic_ = true;
  scale_ = std::ldexp(1.0, config.initial_scale_power);
  min_scale_ = config.min_loss_scale;
  window_ = config.scale_window;
  hysteresis_ = config.hysteresis;
  current_hysteresis_ = config.hysteresis;
  consecutive_hysteresis_ = config.consecutive_hysteresis;
}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;  // static (or no) scaling: an overflowing step is skipped, scale kept
  if (overflow) {
    if (hysteresis_ == 1 || current_hysteresis_ == 1) {
      ZERO_CHECK(scale_ > min_scale_, "gradient overflow with the loss scale already at its minimum (",
                 "fp16.min_loss_scale = ", min_scale_, "): training has diverged");
      scale_ = std::max(scale_ / 2, min_scale_);
    } else {
      --current_hysteresis_;
    }
    last_overflow_iteration_ = iteration_;
  } else {
    if (consecutive_hysteresis_) current_hysteresis_ = hysteresis_;
    if ((iteration_ - last_overflow_iteration_) % window_ == 0) {
      if (!consecutive_hysteresis_) current_hysteresis_ = hysteresis_;
      scale_ *= 2;
    }
  }
  ++iteration_;
}

}  // namespace zero
