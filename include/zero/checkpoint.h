// Reading checkpoints without an engine or MPI: what a checkpoint holds, and the whole model's
// weights assembled from every rank's file (the library side of the zero-ckpt tool).
//
// Engine::save_checkpoint writes (Note [Checkpoint format], src/checkpoint/checkpoint.cpp;
// docs/checkpoints.md):
//   DIR/latest                      the tag of the newest complete checkpoint
//   DIR/TAG/metadata.json           format version, world size, stage, dtypes, optimizer,
//                                   parameters, counters, per rank file bytes/CRC-32/pieces
//   DIR/TAG/rank_NNNNN.safetensors  "master/NAME/BEGIN", "exp_avg/NAME/BEGIN", ... pieces
//
//   auto summary = zero::inspect_checkpoint("ckpt", "", /*verify=*/true);
//   auto weights = zero::read_checkpoint_weights("ckpt", "", at::kBFloat16);
//   zero::export_checkpoint_weights("ckpt", "", "model.safetensors", at::kBFloat16);
//
// Everything here runs in one process and reads files only; errors are zero::Error naming the
// file and the problem.
#pragma once

#include "zero/export.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zero {

/// What metadata.json of one checkpoint records, plus the result of verification.
struct ZERO_API CheckpointSummary {
  struct Parameter {
    std::string name;            // the module's parameter name ("transformer.wte.weight")
    std::vector<int64_t> shape;
    int64_t numel = 0;
  };
  struct File {
    std::string name;            // "rank_00000.safetensors", in DIR/TAG
    int64_t bytes = 0;           // as recorded in the metadata
    uint32_t crc32 = 0;          // as recorded in the metadata
    int64_t pieces = 0;          // parameter pieces it holds
    int64_t elements = 0;        // parameter elements those pieces hold
    std::string problem;         // with verify: "" when it passes a load's checks, else why not
  };
  struct LossScaler {
    double scale = 1.0;
    int current_hysteresis = 0;
    int64_t iteration = 0;
    int64_t last_overflow_iteration = -1;
  };

  std::string dir;               // DIR as given
  std::string tag;               // the tag read (DIR/latest's when none was given)
  std::string path;              // DIR/TAG
  std::string format;            // "zero-checkpoint"
  int version = 0;               // checkpoint format version
  int world_size = 0;            // ranks that saved it (one file each)
  int stage = 0;                 // ZeRO stage it was saved at
  std::string param_dtype;       // "fp32" | "bf16" | "fp16"
  std::string master_dtype;      // "fp32"
  std::string optimizer;         // "AdamW" | "Adam" | "SGD"
  std::vector<std::string> optimizer_state;  // "exp_avg", "exp_avg_sq" (Adam) ...
  int64_t global_steps = 0;      // optimizer steps taken
  int64_t skipped_steps = 0;     // boundaries skipped for fp16 overflow
  int64_t micro_steps = 0;
  int64_t optimizer_steps = 0;
  int gradient_accumulation_steps = 1;
  double lr = 0.0;               // learning rate of the last step
  LossScaler loss_scaler;
  bool scheduler = false;        // the config had a learning-rate scheduler
  std::vector<Parameter> parameters;  // trainable parameters (shared ones once), saved order
  int64_t num_parameters = 0;    // total elements of `parameters`
  std::vector<File> files;       // one per saving rank, in rank order
  std::string client_state;      // the JSON text given to save_checkpoint (compact)
  std::string config;            // the effective config it was saved with (compact JSON;
                                 // "{}" when the checkpoint does not record one)

  bool verified = false;         // inspect_checkpoint ran with verify
  /// With verify, each rank file that fails the checks a load makes of it (missing, truncated,
  /// corrupted, a malformed safetensors header, a tensor the metadata does not describe).
  std::vector<std::string> problems;
  bool ok() const { return problems.empty(); }
};

/// The tag DIR/latest names (the newest complete checkpoint in DIR). Throws zero::Error naming
/// the file when there is none, it is not a small regular file, or the tag it holds is not a
/// valid tag.
ZERO_API std::string latest_checkpoint_tag(const std::string& dir);

/// Reads DIR/TAG/metadata.json (tag "": the one DIR/latest names) and checks it as a load does
/// (docs/checkpoints.md, "Metadata": every field's type and range, the fields against each
/// other, the pieces covering every element once). With `verify`, also reads every rank file
/// and makes every check a load makes of it (File::problem, problems). Throws zero::Error
/// naming the file, the key and the value when there is no checkpoint or its metadata is
/// wrong; a bad rank file is reported, not thrown.
ZERO_API CheckpointSummary inspect_checkpoint(const std::string& dir, const std::string& tag = "",
                                     bool verify = false);

/// The whole trainable parameters, assembled from the "master/NAME/BEGIN" pieces (fp32) of
/// every rank file and converted to `dtype` (fp32, bf16 or fp16; rounding to nearest even,
/// as the engine rounds its 16-bit parameters from the master weights), in the metadata's
/// parameter order, each with its shape. Every file's size and CRC-32 is verified and the
/// pieces must cover every element exactly once; otherwise zero::Error names the file or
/// parameter and what is wrong. Holds the whole model in fp32 plus one rank file at a time.
ZERO_API std::vector<std::pair<std::string, at::Tensor>> read_checkpoint_weights(
    const std::string& dir, const std::string& tag = "", at::ScalarType dtype = at::kFloat);

/// read_checkpoint_weights written as one safetensors file at `out` (atomically: `out.tmp`,
/// then renamed) with metadata {"format": "pt"}: the parameters under their module names,
/// which for zero::gpt2 are Hugging Face GPT2LMHeadModel's (the lm_head is tied to
/// transformer.wte.weight and, as in HF's files, not stored separately). Returns the bytes
/// written. `out` may be in `dir` but not inside one of its checkpoints nor be DIR/latest
/// (zero::Error: it could replace the files being read).
ZERO_API int64_t export_checkpoint_weights(const std::string& dir, const std::string& tag,
                                  const std::string& out, at::ScalarType dtype = at::kFloat);

}  // namespace zero
