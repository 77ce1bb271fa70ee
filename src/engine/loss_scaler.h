// fp16 loss scaling with DeepSpeed's semantics (runtime/fp16/loss_scaler.py).
#pragma once

#include <cstdint>

#include "zero/config.h"

namespace zero {

/// Tracks the loss scale across boundaries. Static when configured with loss_scale > 0, and a
/// constant 1 for fp32/bf16 (no scaling). update() is called once per accumulation boundary
/// with whether any rank saw an inf/nan gradient.
class LossScaler {
 public:
  LossScaler(const LossScaleConfig& config, bool enabled);

  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }

  /// DynamicLossScaler.update_scale: on overflow, lower the scale (or spend one unit of
  /// hysteresis); after `scale_window` clean iterations since the last overflow, double it.
  /// Throws zero::Error when an overflow happens at the minimum scale (DeepSpeed exits the run).
  /// A static scale never changes.
  void update(bool overflow);

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  double min_scale_ = 1.0;
  int64_t window_ = 1000;
  int hysteresis_ = 1;  // delayed_shift
  int current_hysteresis_ = 1;
  bool consecutive_hysteresis_ = false;
  int64_t iteration_ = 0;
  int64_t last_overflow_iteration_ = -1;
};

}  // namespace zero
