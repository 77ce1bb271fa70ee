// Values a config leaves open: "auto" (Hugging Face integration) and a missing optimizer
// section, filled from a trainer's values or recorded as what DeepSpeed's rules made of them
// (internal to src/config/; Note [Values left to the trainer] in trainer_fill.cpp).
#pragma once

#include <string>
#include <vector>

#include "config/reader.h"
#include "zero/config.h"

namespace zero::config_detail {

/// The key paths ("optimizer.params.lr") whose value is the string "auto", in document order.
std::vector<std::string> auto_paths(const Json& root);

/// Fills the "auto" values the Hugging Face integration fills, and a missing optimizer
/// section, from `trainer`; returns what it filled. A given trainer value that contradicts a
/// number the config sets is an error naming both.
std::vector<FilledValue> fill_from_trainer(Json& root, const TrainerValues& trainer,
                                           int world_size, const std::string& source);

/// After parsing: each path of `autos` that `filled` does not cover, with the value the parsed
/// config has there (DeepSpeed's default, or the batch solver's result), appended to `filled`;
/// then `filled` sorted by key.
void record_left_open(const std::vector<std::string>& autos, const std::string& effective_json,
                      std::vector<FilledValue>& filled);

/// A given batch value the config's batch keys solved differently is an error naming both.
void check_trainer_batch(const Config& config, const TrainerValues& trainer);

/// Whether `path` was filled (it is in `filled`).
bool was_filled(const std::vector<FilledValue>& filled, const std::string& path);

}  // namespace zero::config_detail
