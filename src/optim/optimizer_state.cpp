#include "optim/optimizer_state.h"

#include "zero/error.h"

namespace zero {

const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::kAdamW: return "AdamW";
    case OptimizerType::kAdam: return "Adam";
    case OptimizerType::kSGD: return "SGD";
    case OptimizerType::kAdagrad: return "Adagrad";
    case OptimizerType::kLion: return "Lion";
    case OptimizerType::kLamb: return "Lamb";
    case OptimizerType::kMuon: return "Muon";
  }
  ZERO_INTERNAL_ASSERT(false, "unknown optimizer type ", static_cast<int>(type));
  return "";
}

namespace {

constexpr OptimizerType kEveryType[] = {
    OptimizerType::kAdamW,   OptimizerType::kAdam, OptimizerType::kSGD, OptimizerType::kAdagrad,
    OptimizerType::kLion, OptimizerType::kLamb, OptimizerType::kMuon};

}  // namespace

std::vector<std::string> optimizer_type_names() {
  std::vector<std::string> names;
  for (const OptimizerType type : kEveryType) names.push_back(optimizer_type_name(type));
  return names;
}

std::vector<std::string> optimizer_state_names(const OptimizerConfig& config) {
  switch (config.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam:
    case OptimizerType::kLamb:
    // Muon: the matrices' momentum in exp_avg (their exp_avg_sq stays 0), the AdamW half's m
    // and v (Note [Muon under partitioning], optim/muon.h).
    case OptimizerType::kMuon: return {"exp_avg", "exp_avg_sq"};
    case OptimizerType::kSGD:
      if (config.momentum != 0.0) return {"exp_avg"};
      return {};
    case OptimizerType::kAdagrad: return {"exp_avg_sq"};
    case OptimizerType::kLion: return {"exp_avg"};
  }
  ZERO_INTERNAL_ASSERT(false, "unknown optimizer type ", static_cast<int>(config.type));
  return {};
}

std::vector<double> optimizer_state_initial_values(const OptimizerConfig& config) {
  std::vector<double> values(optimizer_state_names(config).size(), 0.0);
  if (config.type == OptimizerType::kAdagrad) values[0] = config.initial_accumulator_value;
  return values;
}

namespace {

// The state lists a checkpoint of the type named `type_name` may hold (SGD: without and with
// momentum), from optimizer_state_names; none for an unknown name.
std::vector<std::vector<std::string>> states_of(const std::string& type_name) {
  for (const OptimizerType type : kEveryType) {
    if (type_name != optimizer_type_name(type)) continue;
    OptimizerConfig config;
    config.type = type;
    std::vector<std::vector<std::string>> states = {optimizer_state_names(config)};
    if (type == OptimizerType::kSGD) {
      config.momentum = 0.9;
      states.push_back(optimizer_state_names(config));
    }
    return states;
  }
  return {};
}

std::string json_list(const std::vector<std::string>& names) {
  std::string out = "[";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", \"" : "\"") + names[i] + "\"";
  return out + "]";
}

}  // namespace

bool state_fits_optimizer(const std::string& type_name, const std::vector<std::string>& state) {
  for (const std::vector<std::string>& allowed : states_of(type_name)) {
    if (state == allowed) return true;
  }
  return false;
}

std::string allowed_states(const std::string& type_name) {
  std::string out;
  for (const std::vector<std::string>& allowed : states_of(type_name)) {
    out += (out.empty() ? "" : " or ") + json_list(allowed);
  }
  return out + " (" + type_name + ")";
}

std::string optimizer_state_description(const OptimizerConfig& config) {
  switch (config.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam: return "Adam m and v, fp32";
    case OptimizerType::kSGD: return "momentum, fp32";
    case OptimizerType::kAdagrad: return "Adagrad's sum of squares, fp32";
    case OptimizerType::kLion: return "Lion's momentum, fp32";
    case OptimizerType::kLamb: return "LAMB's m and v, fp32";
    case OptimizerType::kMuon: return "Muon's momentum and AdamW's m and v, fp32";
  }
  return "";
}

}  // namespace zero
