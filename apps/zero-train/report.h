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

/// Appends one CSV row per step to `path`. Opening writes the header and then `kept_rows`
/// verbatim (a resumed run's earlier rows, see read_metrics), replacing the file atomically;
/// each row is then appended in one write, so no earlier row is ever lost or rewritten.
/// Losses, learning rate and norm are printed at full precision (%.17g): two runs' rows
/// compare bitwise as text.
class CsvLog {
 public:
  explicit CsvLog(const std::string& path, const std::vector<std::string>& kept_rows = {});
  ~CsvLog();
  CsvLog(const CsvLog&) = delete;
  CsvLog& operator=(const CsvLog&) = delete;
  /// Throws zero::Error naming the file when the row cannot be written whole.
  void append(const StepRecord& record);

 private:
  int fd_ = -1;
  std::string path_;
};

/// The rows of a metrics.csv written by CsvLog whose step is at most `last_step`, as records
/// and as their text lines (for a resumed run, which continues the file). Nothing when the
/// file does not exist; throws zero::Error naming the file and line for a malformed row.
struct MetricsRows {
  std::vector<StepRecord> records;
  std::vector<std::string> lines;
  int64_t dropped = 0;  // rows after last_step (trained after the checkpoint, then lost)
  int64_t torn = 0;     // 1 when the last row was cut short (no newline); it is not kept
};
MetricsRows read_metrics(const std::string& path, int64_t last_step);

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
