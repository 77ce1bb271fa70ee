// What each optimizer type is called and what it keeps per element: the one place the config
// writer, the checkpoints, the shard state and the memory plan take these from.
#pragma once

#include <string>
#include <vector>

#include "zero/config.h"

namespace zero {

/// DeepSpeed's name of the type: "AdamW", "Adam", "SGD", "Adagrad", "Lion", "Lamb", "Muon" (the config's
/// optimizer.type as zero writes it, and the checkpoints' optimizer.type).
const char* optimizer_type_name(OptimizerType type);

/// Every type's name, in OptimizerType order: what a checkpoint's optimizer.type may be.
std::vector<std::string> optimizer_type_names();

/// The state kept per element, by checkpoint name (DeepSpeed's state keys), in the order
/// ShardOptimizer::update takes them: Adam(W) {"exp_avg", "exp_avg_sq"}; SGD with momentum
/// {"exp_avg"} (the momentum buffer), plain SGD none; Adagrad {"exp_avg_sq"} (the sum of
/// squared gradients, DeepSpeed's name for it); Lion {"exp_avg"} (its one momentum); LAMB as
/// Adam.
std::vector<std::string> optimizer_state_names(const OptimizerConfig& config);

/// The value each of optimizer_state_names starts at: Adagrad's sum starts at
/// initial_accumulator_value, every other state at 0.
std::vector<double> optimizer_state_initial_values(const OptimizerConfig& config);

/// Whether a checkpoint's state list is one the type named `type_name` keeps (SGD: with or
/// without momentum), and the lists allowed, for the message when it is not.
bool state_fits_optimizer(const std::string& type_name, const std::vector<std::string>& state);
std::string allowed_states(const std::string& type_name);

/// The memory plan's words for the state: "Adam m and v, fp32", ...
std::string optimizer_state_description(const OptimizerConfig& config);

}  // namespace zero
