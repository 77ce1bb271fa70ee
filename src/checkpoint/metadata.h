// The schema of a checkpoint's metadata.json, in one place: every consumer (resume, zero-ckpt
// inspect/verify/export, read_checkpoint_weights, zero-generate) gets the metadata through
// parse_metadata and sees only the typed result. See Note [Checkpoint metadata].
#pragma once

#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "state/training_state.h"
#include "zero/checkpoint.h"

namespace zero::checkpoint_format {

// Note [Checkpoint metadata]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// metadata.json of format version 2 is an object with exactly these keys (docs/checkpoints.md
// lists them with their types): format, version, crc32, world_size, stage, param_dtype,
// master_dtype, optimizer {type, state}, counters {global_steps, skipped_steps, micro_steps,
// optimizer_steps, gradient_accumulation_steps, lr, loss_scaler {scale, current_hysteresis,
// iteration, last_overflow_iteration}}, scheduler, config (optional), client_state,
// parameters [{name, shape}], files [{file, bytes, crc32, pieces [[name, begin, end]]}].
// A CRC-32 over the metadata catches damage and careless edits, not a forger, so every field
// is checked on its own (type and range) and against the others, for what one save writes:
//   - counters: micro_steps = (global_steps + skipped_steps) x gradient_accumulation_steps
//     (a save happens at a boundary); optimizer_steps = global_steps (each applied step is one
//     optimizer step; a skipped one is none); a tag "global_stepN" (save's default) has
//     N = global_steps + skipped_steps;
//   - dtypes: param_dtype fp32, bf16 or fp16; master_dtype fp32;
//   - loss scaling exists only with fp16 parameters: otherwise the scale is 1, the scaler's
//     iteration 0, no overflow recorded and no step skipped; with fp16 the scale is finite and
//     positive, iteration <= the boundaries, the last overflow before it;
//   - the optimizer's state kinds are its type's (Adam/AdamW exp_avg, exp_avg_sq; SGD exp_avg
//     or none); the learning rate is finite and not negative;
//   - parameters have unique names and shapes whose product fits in 64 bits; files list one
//     entry per rank, named rank_NNNNN.safetensors, and their pieces cover every element of
//     every parameter exactly once.
// What the rank files hold is checked against the metadata when they are read (read_rank_file
// in format.h): that check and these are the same for every consumer, so `zero-ckpt inspect
// --verify` accepts exactly what a resume accepts. Each failure is one zero::Error naming the
// file, the key (as a path: "counters.loss_scaler.scale"), the value and what was expected.

/// One piece [begin, end) of a parameter, saved in metadata.json "files"[file].
struct SavedPiece {
  int file = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

/// metadata.json "counters": training progress and the accumulation steps its micro-steps
/// were counted in.
struct SavedCounters {
  TrainingCounters training;
  int gradient_accumulation_steps = 1;
};
nlohmann::json counters_to_json(const SavedCounters& counters);

/// One rank's file, as metadata.json "files"[rank] records it.
struct SavedFile {
  std::string name;  // rank_file_name(rank)
  int64_t bytes = 0;
  uint32_t crc32 = 0;
  int64_t pieces = 0;    // pieces it holds
  int64_t elements = 0;  // elements of those pieces
};

/// metadata.json, checked (Note [Checkpoint metadata]).
struct Metadata {
  int version = 0;
  uint32_t crc32 = 0;
  int world_size = 0;
  int stage = 0;
  c10::ScalarType param_dtype = c10::ScalarType::Float;
  std::string optimizer;                     // "AdamW", "Adam", "SGD"
  std::vector<std::string> optimizer_state;  // kinds of state tensors, in save order
  SavedCounters counters;
  bool scheduler = false;
  nlohmann::json config = nlohmann::json::object();  // the effective config it was saved with
  nlohmann::json client_state;
  std::vector<CheckpointSummary::Parameter> parameters;  // metadata order
  std::vector<SavedFile> files;                          // one per rank, in rank order
  std::map<std::string, std::vector<SavedPiece>> pieces;  // by parameter name, file order

  /// Whether the rank files hold the 16-bit parameter copy ("param16/..."): stage 3 with
  /// 16-bit parameters.
  bool saves_param16() const { return stage == 3 && param_dtype != c10::ScalarType::Float; }
  /// The kinds of tensor each piece has in its rank file: "master", the optimizer state, and
  /// "param16" where saves_param16().
  std::vector<std::string> piece_kinds() const;
};

/// N for a tag of save_checkpoint's default form "global_stepN" (N: 1 to 18 digits), which
/// names the boundary the checkpoint was saved at; none for any other tag.
std::optional<int64_t> boundary_in_tag(const std::string& tag);

/// Checks `json` (metadata.json of checkpoint `tag`, read from `path`, which errors name) by
/// Note [Checkpoint metadata] and returns it typed. Pure: no file is read. Throws zero::Error
/// naming the path, the key, the value and what was expected.
Metadata parse_metadata(const nlohmann::json& json, const std::string& path, const std::string& tag);

}  // namespace zero::checkpoint_format
