// The one place zero reads environment variables. See env.h for the list.
#include "common/env.h"

#include <cerrno>
#include <cstdlib>
#include <string>

#include "zero/error.h"

namespace zero::env {
namespace {

int64_t read_positive_int(const char* name, int64_t default_value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return default_value;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  ZERO_CHECK(errno == 0 && end != text && *end == '\0' && value > 0, "environment variable ",
             name, "='", text, "' is invalid: expected a positive integer");
  return value;
}

}  // namespace

int64_t ring_segment_bytes() {
  static const int64_t value = read_positive_int("ZERO_RING_SEGMENT_BYTES", int64_t{256} << 10);
  return value;
}

ProgressStyle progress_style() {
  static const ProgressStyle value = [] {
    const char* text = std::getenv("ZERO_PROGRESS");
    if (text == nullptr || *text == '\0') return ProgressStyle::kAuto;
    const std::string style = text;
    if (style == "bar") return ProgressStyle::kBar;
    if (style == "lines") return ProgressStyle::kLines;
    ZERO_CHECK(false, "environment variable ZERO_PROGRESS='", style,
               "' is invalid: expected 'bar' or 'lines'");
    return ProgressStyle::kAuto;
  }();
  return value;
}

}  // namespace zero::env
