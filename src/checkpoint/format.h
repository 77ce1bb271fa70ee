// The on-disk layout of a checkpoint (Note [Checkpoint format] in checkpoint.cpp), shared by
// the engine's save/load (checkpoint.cpp) and the standalone reader (checkpoint_reader.cpp):
// file names, tensor keys, the metadata's format and version, and the checks every reader
// makes (tag, metadata, each file's size and CRC-32). Internal: not part of the public API.
#pragma once

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "state/training_state.h"
#include "zero/checkpoint.h"

namespace zero {
struct SafetensorsFile;
}

namespace zero::checkpoint_format {

constexpr const char* kFormat = "zero-checkpoint";  // metadata.json "format"
// metadata.json "version". 2 added "crc32", the metadata's own checksum (metadata_checksum);
// version 1 checkpoints are refused with the version named.
constexpr int kVersion = 2;
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kLatestFile = "latest";
constexpr const char* kTemporaryPrefix = ".tmp-";   // DIR/.tmp-TAG while a save is running

/// "rank_00000.safetensors".
std::string rank_file_name(int rank);

/// "KIND/NAME/BEGIN": the tensor of a rank file holding elements [BEGIN, BEGIN + numel) of the
/// flattened parameter NAME; KIND is "master", an optimizer state ("exp_avg", ...) or "param16".
std::string piece_key(const std::string& kind, const std::string& name, int64_t begin);

/// Throws zero::Error unless `tag` can name a checkpoint directory: non-empty, no '/', not
/// starting with '.', not "latest".
void check_tag(const std::string& tag);

/// The whole regular file as text, at most `max_bytes` (Note [Bounded input] in
/// common/bounded_input.h); an error names `what` and the path. A symbolic link is refused:
/// every file read this way lies inside a checkpoint directory, and a link could lead out.
std::string read_text_file(const std::filesystem::path& path, const std::string& what,
                           int64_t max_bytes);

/// `tag` itself when non-empty (checked), else the tag DIR/latest names; throws zero::Error
/// when there is no DIR/latest.
std::string resolve_tag(const std::filesystem::path& root, const std::string& tag);

/// DIR/TAG after checking that it is a directory and not a symbolic link (which could lead out
/// of DIR); throws zero::Error naming the path otherwise.
std::filesystem::path checkpoint_directory(const std::filesystem::path& root,
                                           const std::string& tag);

/// metadata.json "crc32": CRC-32 of the compact dump of the metadata without its "crc32" key.
/// nlohmann::json keeps object keys sorted and prints doubles in their shortest round-trip
/// form, so parsing and dumping again reproduces the text the save checksummed.
uint32_t metadata_checksum(const nlohmann::json& metadata);

/// Reads and parses DIR/TAG/metadata.json and checks its "format", "version", "crc32" (edited
/// or damaged metadata is refused) and the ranges of every integer later narrowed; throws
/// zero::Error naming the file and what is wrong.
nlohmann::json read_metadata(const std::filesystem::path& checkpoint_dir);

/// CRC-32 (zlib's crc32) of a whole file, read in 4 MiB pieces; its size in `bytes`.
uint32_t file_crc32(const std::filesystem::path& path, int64_t* bytes);

/// Checks rank `index`'s file of the checkpoint in `checkpoint_dir` against its metadata entry
/// (metadata.json "files"[index]: "file", "bytes", "crc32", "pieces") and returns its path.
/// The entry must name rank_file_name(index), the only name a save writes: a plain name, so
/// no metadata can make zero open a file outside the checkpoint ("../x", "/etc/passwd"). The
/// file must be a regular file in the directory, not a symbolic link (which could lead out of
/// it), have the recorded size and the recorded CRC-32. Throws zero::Error naming the file and
/// what is wrong (renamed, missing, a link, truncated, corrupted).
std::filesystem::path verify_rank_file(const std::filesystem::path& checkpoint_dir,
                                       const nlohmann::json& files, int index);

/// metadata.json "counters": training progress (the engine's TrainingCounters) and the
/// accumulation steps its micro-steps were counted in; written by save_checkpoint and read by
/// load_checkpoint and inspect_checkpoint.
struct SavedCounters {
  TrainingCounters training;
  int gradient_accumulation_steps = 1;
};
nlohmann::json counters_to_json(const SavedCounters& counters);
/// Throws (nlohmann::json's error) when a key is missing or of the wrong type.
SavedCounters counters_from_json(const nlohmann::json& json);

/// One piece [begin, end) of a parameter, saved in metadata.json "files"[file].
struct SavedPiece {
  int file = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

/// Every parameter's saved pieces by parameter name, from metadata.json "files", in file order.
std::map<std::string, std::vector<SavedPiece>> saved_pieces(const nlohmann::json& files);

/// "" when `pieces` cover [0, numel) exactly once, else what is wrong (a gap, an overlap, a
/// piece out of range), naming the parameter and the elements.
std::string coverage_problem(const std::string& name, int64_t numel,
                             std::vector<SavedPiece> pieces);

/// One checkpoint's metadata with its parameters and pieces parsed: what the loader behind
/// resume and the reader behind zero-ckpt both start from, so they make the same checks.
struct Layout {
  std::filesystem::path dir;  // DIR/TAG
  std::string tag;
  nlohmann::json metadata;
  std::vector<CheckpointSummary::Parameter> parameters;   // metadata order
  std::map<std::string, std::vector<SavedPiece>> pieces;  // by parameter name
};

/// Resolves the tag (DIR/latest's when empty), reads the metadata (read_metadata) and parses
/// its parameters and pieces. Throws zero::Error naming metadata.json when a field is missing
/// or of the wrong type, a shape is negative, or pieces name a parameter it does not list.
Layout read_layout(const std::filesystem::path& root, const std::string& tag);

/// Every parameter whose pieces do not cover its elements exactly once (coverage_problem),
/// each message naming the checkpoint.
std::vector<std::string> coverage_problems(const Layout& layout);

/// Piece `piece` of parameter `name`, kind `kind` ("master", "exp_avg", ...), from the rank
/// file `file` read from `path`: it must be there, fp32, one-dimensional and hold exactly the
/// piece's elements. Throws zero::Error naming the file, the key and what was found.
const at::Tensor& piece_tensor(const SafetensorsFile& file, const std::filesystem::path& path,
                               const std::string& kind, const std::string& name,
                               const SavedPiece& piece);

}  // namespace zero::checkpoint_format
