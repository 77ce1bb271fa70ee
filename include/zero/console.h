// Console facts the training job needs.
#pragma once

#include "zero/export.h"

namespace zero {

/// Whether progress output should be drawn for a terminal (a bar redrawn in place) rather than
/// written as plain lines. Under mpirun a rank's stdout is a pseudo-terminal even when the
/// launcher's output goes to a file, so the launcher (zero-run) passes its own answer in
/// ZERO_PROGRESS=bar|lines; without it this is isatty(stdout).
ZERO_API bool stdout_is_terminal();

}  // namespace zero
