// What zero-train shows and writes: the live progress line, the per-step CSV, the loss-curve
// SVG and the end-of-run summary table.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zero::train {

struct StepRecord {
  int64_t step = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double loss_scale = 1;
  double tokens_per_second = 0;
  double step_ms = 0;
  double val_loss = -1;  // -1: not evaluated at this step
  bool skipped = false;
};

/// Rank 0's console output: a progress bar redrawn in place on a terminal, one plain line per
/// step otherwise (logs, CI).
class Progress {
 public:
  Progress(int64_t total_steps, bool terminal);
  void update(const StepRecord& record, double eta_seconds);
  void message(const std::string& line);  // a line above the bar
  void finish();

 private:
  int64_t total_;
  bool terminal_;
  bool bar_drawn_ = false;
};

/// Appends one CSV row per step to `path` (header written on open).
class CsvLog {
 public:
  explicit CsvLog(const std::string& path);
  ~CsvLog();
  void append(const StepRecord& record);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

/// A self-contained SVG line plot of training (and validation) loss against step.
void write_loss_svg(const std::string& path, const std::vector<StepRecord>& records,
                    const std::string& title);

/// Rows of "label | measured | expected/theory" printed as an aligned table.
struct SummaryRow {
  std::string label;
  std::string measured;
  std::string expected;
};
std::string format_summary(const std::vector<SummaryRow>& rows);

std::string human_bytes(double bytes);

}  // namespace zero::train
