// Writing small files so that a reader never sees half of one: what zero's programs and
// checkpoints use for every file they replace (checkpoint metadata and `latest`, a run's
// config.json and loss.svg, an export's config.json).
#pragma once

#include "zero/export.h"

#include <string>

namespace zero {

/// Replaces `path` with `text` atomically: writes PATH.tmp, flushes it to disk (fsync), renames
/// it over `path` and flushes the directory. A crash at any point leaves either the old file
/// or the new one, never a truncated one. The directory must exist. Throws zero::Error naming
/// the file and the system's reason (e.g. "No space left on device"); a failed write removes
/// PATH.tmp.
ZERO_API void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace zero
