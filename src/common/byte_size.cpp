#include "common/byte_size.h"

#include <cstdio>

namespace zero {

std::string byte_size_text(int64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) {
    std::snprintf(text, sizeof(text), "%.2f GiB", b / (1 << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(text, sizeof(text), "%.1f MiB", b / (1 << 20));
  } else {
    std::snprintf(text, sizeof(text), "%.0f KiB", b / 1024);
  }
  return text;
}

}  // namespace zero
