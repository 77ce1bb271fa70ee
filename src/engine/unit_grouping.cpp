#include "engine/unit_grouping.h"

#include <torch/nn/module.h>

#include <unordered_map>

#include "zero/unit.h"

namespace zero {

UnitAssignment assign_units(const ModelParameters& collected, int64_t persistence_threshold,
                            int64_t model_persistence_cap) {
  UnitAssignment result;
  const auto& modules = collected.modules;
  std::unordered_map<std::string, int> index_of_name;
  result.unit_of_module.assign(modules.size(), -1);
  for (int m = 0; m < static_cast<int>(modules.size()); ++m) {
    const std::string& name = modules[m].first;
    index_of_name.emplace(name, m);
    int unit = -1;
    if (!name.empty()) {  // pre-order: the parent came first
      const auto separator = name.rfind('.');
      const auto parent =
          index_of_name.find(separator == std::string::npos ? "" : name.substr(0, separator));
      if (parent != index_of_name.end()) unit = result.unit_of_module[parent->second];
    }
    if (is_declared_unit(*modules[m].second)) {
      result.unit_modules.push_back(m);
      unit = static_cast<int>(result.unit_modules.size()) - 1;
    }
    result.unit_of_module[m] = unit;
  }
  int64_t persistent_numel = 0;
  for (const TrainableParameter& p : collected.parameters) {
    const int home = result.unit_of_module[p.module];
    const bool small = p.numel <= persistence_threshold &&
                       persistent_numel + p.numel <= model_persistence_cap;
    result.home_unit.push_back(home);
    result.persistent.push_back(home < 0 || small);
    if (result.persistent.back()) persistent_numel += p.numel;
  }
  return result;
}

}  // namespace zero
