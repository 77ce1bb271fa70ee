#include "report.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "zero/error.h"
#include "zero/files.h"

namespace zero::train {

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::abs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  char text[64];
  std::snprintf(text, sizeof(text), unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

Progress::Progress(int64_t total_steps, bool terminal) : total_(total_steps), terminal_(terminal) {}

void Progress::update(const StepRecord& r, double eta_seconds) {
  char stats[256];
  std::snprintf(stats, sizeof(stats),
                "loss %.4f | lr %.2e | grad norm %.3f | scale %g | %.0f tok/s | %.0f ms/step%s",
                r.loss, r.lr, r.grad_norm, r.loss_scale, r.tokens_per_second, r.step_ms,
                r.skipped ? " | skipped (overflow)" : "");
  if (!terminal_) {
    std::printf("step %lld/%lld | %s\n", static_cast<long long>(r.step),
                static_cast<long long>(total_), stats);
    std::fflush(stdout);
    return;
  }
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * r.step / std::max<int64_t>(total_, 1));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  const int eta = static_cast<int>(std::max(0.0, eta_seconds));
  std::printf("\r\033[K[%s] %lld/%lld | %s | ETA %d:%02d", bar.c_str(),
              static_cast<long long>(r.step), static_cast<long long>(total_), stats, eta / 60,
              eta % 60);
  std::fflush(stdout);
  bar_drawn_ = true;
}

void Progress::message(const std::string& line) {
  if (terminal_ && bar_drawn_) std::printf("\r\033[K");
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void Progress::finish() {
  if (terminal_ && bar_drawn_) std::printf("\n");
  std::fflush(stdout);
}

namespace {
constexpr const char* kCsvHeader =
    "step,loss,val_loss,lr,grad_norm,loss_scale,skipped,tokens_per_second,step_ms";
}  // namespace

CsvLog::CsvLog(const std::string& path, const std::vector<std::string>& kept_rows) : path_(path) {
  // The header and the kept rows replace the file atomically (a resumed run that dies here
  // leaves the previous file whole); the rows after them are appended (append()).
  std::string text = std::string(kCsvHeader) + "\n";
  for (const std::string& row : kept_rows) text += row + "\n";
  zero::write_file_atomically(path, text);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ZERO_CHECK(fd_ >= 0, "cannot open ", path, " for appending: ", std::strerror(errno));
}

CsvLog::~CsvLog() {
  if (fd_ >= 0) ::close(fd_);
}

void CsvLog::append(const StepRecord& r) {
  // One write(2) of the whole row to a file opened O_APPEND: the row lands whole after the
  // earlier ones, or (killed mid-write, disk full) as a torn last line that read_metrics drops.
  char row[512];
  int n = std::snprintf(row, sizeof(row), "%lld,%.17g,", static_cast<long long>(r.step), r.loss);
  if (r.val_loss >= 0) n += std::snprintf(row + n, sizeof(row) - n, "%.17g", r.val_loss);
  n += std::snprintf(row + n, sizeof(row) - n, ",%.17g,%.17g,%g,%d,%.1f,%.1f\n", r.lr,
                     r.grad_norm, r.loss_scale, r.skipped ? 1 : 0, r.tokens_per_second, r.step_ms);
  ZERO_INTERNAL_ASSERT(n > 0 && n < static_cast<int>(sizeof(row)), "CSV row of ", n, " bytes");
  ssize_t written;
  do {
    written = ::write(fd_, row, static_cast<size_t>(n));
  } while (written < 0 && errno == EINTR);
  ZERO_CHECK(written == n, "cannot append to ", path_, ": ",
             written < 0 ? std::strerror(errno) : "short write (is the disk full?)");
}

MetricsRows read_metrics(const std::string& path, int64_t last_step) {
  MetricsRows rows;
  std::ifstream in(path);
  if (!in.good()) return rows;
  std::string line;
  std::getline(in, line);
  ZERO_CHECK(line == kCsvHeader, path, " is not a zero-train metrics file: its first line is '",
             line, "', expected '", kCsvHeader, "'");
  for (int64_t number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    // A last line without its newline is a row cut short (the run was killed or the disk
    // filled while append() wrote it): that step was never finished, so it is trained again.
    if (in.eof()) {
      ++rows.torn;
      break;
    }
    std::vector<std::string> fields;
    std::stringstream split(line);
    for (std::string field; std::getline(split, field, ',');) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    ZERO_CHECK(fields.size() == 9, path, " line ", number, ": ", fields.size(),
               " fields where the header has 9: '", line, "'");
    StepRecord r;
    try {
      r.step = std::stoll(fields[0]);
      r.loss = std::stod(fields[1]);
      r.val_loss = fields[2].empty() ? -1 : std::stod(fields[2]);
      r.lr = std::stod(fields[3]);
      r.grad_norm = std::stod(fields[4]);
      r.loss_scale = std::stod(fields[5]);
      r.skipped = fields[6] == "1";
      r.tokens_per_second = std::stod(fields[7]);
      r.step_ms = std::stod(fields[8]);
    } catch (const std::exception&) {
      ZERO_CHECK(false, path, " line ", number, " has a field that is not a number: '", line, "'");
    }
    if (r.step > last_step) {
      ++rows.dropped;
      continue;
    }
    rows.records.push_back(r);
    rows.lines.push_back(line);
  }
  return rows;
}

void write_loss_svg(const std::string& path, const std::vector<StepRecord>& records,
                    const std::string& title) {
  constexpr double kWidth = 720, kHeight = 420, kLeft = 70, kRight = 20, kTop = 40, kBottom = 50;
  double max_step = 1, lo = 1e300, hi = -1e300;
  for (const auto& r : records) {
    max_step = std::max(max_step, static_cast<double>(r.step));
    lo = std::min(lo, r.loss);
    hi = std::max(hi, r.loss);
    if (r.val_loss >= 0) {
      lo = std::min(lo, r.val_loss);
      hi = std::max(hi, r.val_loss);
    }
  }
  if (records.empty()) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double pad = 0.05 * (hi - lo);
  lo -= pad;
  hi += pad;
  auto x = [&](double step) { return kLeft + (kWidth - kLeft - kRight) * step / max_step; };
  auto y = [&](double loss) { return kTop + (kHeight - kTop - kBottom) * (hi - loss) / (hi - lo); };
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\""
      << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << kWidth / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
      << title << "</text>\n";
  // Axes with 5 ticks each.
  svg << "<line x1=\"" << kLeft << "\" y1=\"" << kHeight - kBottom << "\" x2=\"" << kWidth - kRight
      << "\" y2=\"" << kHeight - kBottom << "\" stroke=\"black\"/>\n"
      << "<line x1=\"" << kLeft << "\" y1=\"" << kTop << "\" x2=\"" << kLeft << "\" y2=\""
      << kHeight - kBottom << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double step = max_step * i / 4;
    const double loss = lo + (hi - lo) * i / 4;
    svg << "<text x=\"" << x(step) << "\" y=\"" << kHeight - kBottom + 18
        << "\" text-anchor=\"middle\">" << static_cast<long long>(std::round(step)) << "</text>\n";
    char label[32];
    std::snprintf(label, sizeof(label), "%.2f", loss);
    svg << "<text x=\"" << kLeft - 8 << "\" y=\"" << y(loss) + 4 << "\" text-anchor=\"end\">"
        << label << "</text>\n"
        << "<line x1=\"" << kLeft << "\" y1=\"" << y(loss) << "\" x2=\"" << kWidth - kRight
        << "\" y2=\"" << y(loss) << "\" stroke=\"#e5e5e5\"/>\n";
  }
  svg << "<text x=\"" << (kLeft + kWidth - kRight) / 2 << "\" y=\"" << kHeight - 12
      << "\" text-anchor=\"middle\">step</text>\n"
      << "<text x=\"16\" y=\"" << (kTop + kHeight - kBottom) / 2
      << "\" text-anchor=\"middle\" transform=\"rotate(-90 16 " << (kTop + kHeight - kBottom) / 2
      << ")\">loss</text>\n";
  auto polyline = [&](bool validation, const char* colour) {
    std::ostringstream points;
    int n = 0;
    for (const auto& r : records) {
      const double value = validation ? r.val_loss : r.loss;
      if (validation && value < 0) continue;
      points << x(static_cast<double>(r.step)) << "," << y(value) << " ";
      ++n;
    }
    if (n == 0) return;
    svg << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\" points=\""
        << points.str() << "\"/>\n";
  };
  polyline(false, "#1f77b4");
  polyline(true, "#d62728");
  svg << "<text x=\"" << kWidth - kRight - 150 << "\" y=\"" << kTop + 14
      << "\" fill=\"#1f77b4\">train loss</text>\n"
      << "<text x=\"" << kWidth - kRight - 150 << "\" y=\"" << kTop + 30
      << "\" fill=\"#d62728\">validation loss</text>\n</svg>\n";
  zero::write_file_atomically(path, svg.str());
}

std::string format_summary(const std::vector<SummaryRow>& rows) {
  size_t a = 0, b = 0, c = 0;
  for (const auto& r : rows) {
    a = std::max(a, r.label.size());
    b = std::max(b, r.measured.size());
    c = std::max(c, r.expected.size());
  }
  std::ostringstream out;
  auto line = [&](const std::string& x, const std::string& y, const std::string& z) {
    out << "  " << x << std::string(a - x.size(), ' ') << "  " << std::string(b - y.size(), ' ')
        << y << "  " << z << "\n";
  };
  for (const auto& r : rows) line(r.label, r.measured, r.expected);
  return out.str();
}

}  // namespace zero::train
