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
  }
  ZERO_INTERNAL_ASSERT(false, "unknown optimizer type ", static_cast<int>(type));
  return "";
}

std::vector<std::string> optimizer_state_names(const OptimizerConfig& config) {
  switch (config.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam:
    case OptimizerType::kLamb: return {"exp_avg", "exp_avg_sq"};
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

bool state_fits_optimizer(const std::string& type_name, const std::vector<std::string>& state) {
  using Names = std::vector<std::string>;
  if (type_name == "SGD") return state.empty() || state == Names{"exp_avg"};
  if (type_name == "Adagrad") return state == Names{"exp_avg_sq"};
  if (type_name == "Lion") return state == Names{"exp_avg"};
  return state == Names{"exp_avg", "exp_avg_sq"};
}

std::string allowed_states(const std::string& type_name) {
  if (type_name == "SGD") return "[] or [\"exp_avg\"] (SGD without or with momentum)";
  if (type_name == "Adagrad") return "[\"exp_avg_sq\"] (Adagrad's sum of squared gradients)";
  if (type_name == "Lion") return "[\"exp_avg\"] (Lion's momentum)";
  if (type_name == "Lamb") return "[\"exp_avg\", \"exp_avg_sq\"] (LAMB's m and v)";
  return "[\"exp_avg\", \"exp_avg_sq\"] (" + type_name + ")";
}

std::string optimizer_state_description(const OptimizerConfig& config) {
  switch (config.type) {
    case OptimizerType::kAdamW:
    case OptimizerType::kAdam: return "Adam m and v, fp32";
    case OptimizerType::kSGD: return "momentum, fp32";
    case OptimizerType::kAdagrad: return "Adagrad's sum of squares, fp32";
    case OptimizerType::kLion: return "Lion's momentum, fp32";
    case OptimizerType::kLamb: return "LAMB's m and v, fp32";
  }
  return "";
}

}  // namespace zero
