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

namespace zero::checkpoint_format {

constexpr const char* kFormat = "zero-checkpoint";  // metadata.json "format"
constexpr int kVersion = 1;                         // metadata.json "version"
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
/// common/bounded_input.h); an error names `what` and the path.
std::string read_text_file(const std::filesystem::path& path, const std::string& what,
                           int64_t max_bytes);

/// `tag` itself when non-empty (checked), else the tag DIR/latest names; throws zero::Error
/// when there is no DIR/latest.
std::string resolve_tag(const std::filesystem::path& root, const std::string& tag);

/// Reads and parses DIR/TAG/metadata.json and checks its "format" and "version"; throws
/// zero::Error naming the file when it is missing, not JSON, not a zero checkpoint or of
/// another format version.
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

/// metadata.json "counters": training progress, written by save_checkpoint and read by
/// load_checkpoint and inspect_checkpoint.
struct SavedCounters {
  int64_t global_steps = 0;
  int64_t skipped_steps = 0;
  int64_t micro_steps = 0;
  int64_t optimizer_steps = 0;
  int gradient_accumulation_steps = 1;
  double lr = 0.0;
  double loss_scale = 1.0;
  int current_hysteresis = 1;
  int64_t scaler_iteration = 0;
  int64_t last_overflow_iteration = -1;
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

}  // namespace zero::checkpoint_format
