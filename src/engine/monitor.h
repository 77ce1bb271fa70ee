// What the engine reports on its own, as DeepSpeed's engine does: a progress line every
// `steps_per_print` steps, the wall-clock breakdown of backward and step (`wall_clock_breakdown`),
// DeepSpeed-style CSV files (`csv_monitor`) and TensorBoard event files (`tensorboard`), with
// the program's own events beside (Engine::write_monitor_events). Rank 0 only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensorboard.h"
#include "zero/config.h"
#include "zero/engine.h"

namespace zero {

struct BoundaryRecord {
  int64_t global_steps = 0;    // boundaries so far, skipped ones included (DeepSpeed's count)
  int64_t skipped_steps = 0;
  int64_t global_samples = 0;
  double loss = 0;             // mean unscaled loss of the window's micro-steps on this rank
  double lr = 0;
  double loss_scale = 1;
  double grad_norm = 0;
  double backward_ms = 0;      // summed over the window's micro-steps
  double step_ms = 0;
};

class EngineMonitor {
 public:
  /// Rank 0 creates csv_monitor's directory and opens its files; throws zero::Error naming
  /// the path when it cannot. Other ranks report nothing.
  EngineMonitor(const Config& config, int rank);
  ~EngineMonitor();
  EngineMonitor(const EngineMonitor&) = delete;
  EngineMonitor& operator=(const EngineMonitor&) = delete;

  void record(const BoundaryRecord& record);
  /// The program's events (Engine::write_monitor_events): to every enabled monitor.
  void write_events(const std::vector<MonitorEvent>& events);
  /// Whether anything is reported at all (rank 0 with steps_per_print, wall_clock_breakdown,
  /// csv_monitor or tensorboard): the engine skips collecting the loss otherwise.
  bool reporting() const {
    return active_ && (print_every_ > 0 || !csv_dir_.empty() || tensorboard_ != nullptr);
  }

 private:
  void open_csv(const std::string& event);
  // One event to every enabled monitor (CSV files are opened on first use).
  void write_event(const std::string& event, int64_t x, double value);

  bool active_ = false;
  int64_t print_every_ = 0;  // 0: no progress line
  bool breakdown_ = false;
  bool fp16_ = false;
  std::string csv_dir_;      // empty: no CSV files
  std::map<std::string, std::FILE*> csv_files_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // null: no tensorboard
  double backward_ms_ = 0, step_ms_ = 0;
  int64_t timed_steps_ = 0;
};

}  // namespace zero
