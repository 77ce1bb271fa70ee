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

  /// What changes as training goes (for checkpoints); the configuration is not included.
  struct State {
    double scale = 1.0;
    int current_hysteresis = 1;
    int64_t iteration = 0;
    int64_t last_overflow_iteration = -1;
  };
  State state() const { return {scale_, current_hysteresis_, iteration_, last_overflow_iteration_}; }
  void restore(const State& state) {
    scale_ = state.scale;
    current_hysteresis_ = state.current_hysteresis;
    iteration_ = state.iteration;
    last_overflow_iteration_ = state.last_overflow_iteration;
  }

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
