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

#include "checkpoint/metadata.h"
#include "zero/checkpoint.h"
#include "zero/safetensors.h"

namespace zero::checkpoint_format {

constexpr const char* kFormat = "zero-checkpoint";  // metadata.json "format"
// metadata.json "version". 2 added "crc32", the metadata's own checksum (metadata_checksum);
// version 1 checkpoints are refused with the version named.
constexpr int kVersion = 2;
constexpr const char* kMetadataFile = "metadata.json";
constexpr const char* kLatestFile = "latest";
constexpr const char* kTemporaryPrefix = ".tmp-";   // DIR/.tmp-TAG while a save is running
constexpr const char* kGeneratorKey = "rng/cpu";    // a rank file's CPU generator state

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

/// CRC-32 (zlib's crc32) of a whole file, read in 4 MiB pieces; its size in `bytes`.
uint32_t file_crc32(const std::filesystem::path& path, int64_t* bytes);

/// "" when `pieces` cover [0, numel) exactly once, else what is wrong (a gap, an overlap, a
/// piece out of range), naming the parameter and the elements.
std::string coverage_problem(const std::string& name, int64_t numel,
                             std::vector<SavedPiece> pieces);

/// One checkpoint: where it is and its metadata, checked (Note [Checkpoint metadata]). What
/// the loader behind resume and the reader behind zero-ckpt both start from.
struct Layout {
  std::filesystem::path dir;  // DIR/TAG
  std::string tag;
  Metadata metadata;
};

/// Resolves the tag (DIR/latest's when empty), reads DIR/TAG/metadata.json (bounded, no
/// symbolic link) and checks it (parse_metadata). Throws zero::Error naming the file and what
/// is wrong.
Layout read_layout(const std::filesystem::path& root, const std::string& tag);

/// Rank `index`'s file, read and checked as every consumer checks it: a regular file (not a
/// link) of the recorded size and CRC-32; a well-formed safetensors file (zero/safetensors.h);
/// for every piece the metadata places in it, a tensor of each kind (Metadata::piece_kinds):
/// fp32 (param16: param_dtype), one-dimensional, of the piece's length; nothing else but
/// "rng/cpu", a valid CPU generator state. Throws zero::Error naming the file, the key and
/// what was found.
SafetensorsFile read_rank_file(const Layout& layout, int index);

/// Piece `piece` of parameter `name`, kind `kind` ("master", "exp_avg", ...), from the rank
/// file `file` read from `path`: it must be there, of `dtype` (fp32 but for "param16"),
/// one-dimensional and hold exactly the piece's elements. Throws zero::Error naming the file,
/// the key and what was found.
const at::Tensor& piece_tensor(const SafetensorsFile& file, const std::filesystem::path& path,
                               const std::string& kind, const std::string& name,
                               const SavedPiece& piece, at::ScalarType dtype = at::kFloat);

}  // namespace zero::checkpoint_format
