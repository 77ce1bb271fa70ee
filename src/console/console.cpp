#include "zero/console.h"

#include <unistd.h>

#include "common/env.h"

namespace zero {

bool stdout_is_terminal() {
  switch (env::progress_style()) {
    case env::ProgressStyle::kBar: return true;
    case env::ProgressStyle::kLines: return false;
    case env::ProgressStyle::kAuto: break;
  }
  return isatty(STDOUT_FILENO) == 1;
}

}  // namespace zero
