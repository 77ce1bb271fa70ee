// Bounded, typed reads of the small files zero is handed (configs, checkpoint metadata and
// index files, encoders) and the nesting limit for the JSON in them: what a hostile or careless
// input cannot get past. See Note [Bounded input].
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "zero/export.h"

namespace zero {

// Note [Bounded input]
// ~~~~~~~~~~~~~~~~~~~~
// Every file zero reads whole is read through read_regular_file, and every JSON text it
// parses is bounded by kMaxJsonDepth:
// - Only regular files: a FIFO would block the open or the read forever, /dev/zero would grow
//   memory until bad_alloc, a directory reads as an error deep inside a parser. The type is
//   checked on the opened descriptor (opened non-blocking, so a FIFO put in place between a
//   check and the open cannot block either), so there is no window between check and use.
// - A size cap per kind of file, checked against the size before reading and again against
//   what was read (a file may grow while it is read).
// - JSON nesting deeper than kMaxJsonDepth is refused while parsing: nlohmann's parser is
//   iterative, but dump(), comparisons and our own walkers recurse, and 100,000 nested
//   arrays overflow the stack there. zero's own files nest at most 6 levels.
// Errors are zero::Error naming the file (`what` 'path') and the limit.

/// Caps for read_regular_file, by kind of file.
inline constexpr int64_t kMaxConfigBytes = 16LL << 20;    // a DeepSpeed JSON config
inline constexpr int64_t kMaxMetadataBytes = 1LL << 30;   // checkpoint metadata.json (piece lists)
inline constexpr int64_t kMaxIndexBytes = 4096;           // a checkpoint's `latest`
inline constexpr int64_t kMaxEncoderBytes = 256LL << 20;  // a GPT-2 encoder.json (1 MB real)
inline constexpr int64_t kMaxTokenizerBytes = 64LL << 20;  // a tokenizer.json (Llama 3's: 9 MB)

/// Deepest JSON nesting accepted anywhere (objects and arrays count one level each).
inline constexpr int kMaxJsonDepth = 64;

/// Whether read_regular_file follows a symbolic link at the path's last component. Files inside
/// a checkpoint refuse links (a link could lead out of the checkpoint: Note [Checkpoint
/// format]); files the user names (configs, encoders) follow them.
enum class SymbolicLinks { kFollow, kRefuse };

/// The whole content of the regular file `path`, at most `max_bytes` long. `what` names the
/// file's role in messages ("config file", "checkpoint metadata"). Throws zero::Error when the
/// path does not exist, is not a regular file (naming what it is), is a symbolic link and
/// `links` is kRefuse, is larger than the cap, or cannot be read.
ZERO_INTERNAL_API std::string read_regular_file(const std::string& path, const std::string& what, int64_t max_bytes,
                              SymbolicLinks links = SymbolicLinks::kFollow);

/// Throws zero::Error "`source`: JSON nested deeper than ..." when a container starts at
/// `depth`, nlohmann's parser-callback depth at object_start and array_start (the number of
/// containers around the one that starts: 0 for the outermost), kMaxJsonDepth or deeper.
/// Call it from a parser callback on those two events.
ZERO_INTERNAL_API void check_json_depth(int depth, const std::string& source);

/// `text` parsed as JSON with nesting bounded by kMaxJsonDepth; any failure (syntax, depth, a
/// number beyond double's range) is a zero::Error "`source`: invalid JSON: ...".
ZERO_INTERNAL_API nlohmann::json parse_bounded_json(const std::string& text, const std::string& source);

}  // namespace zero
