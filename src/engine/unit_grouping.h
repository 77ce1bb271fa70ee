// Stage 3's grouping rule (Note [Stage 3 units] in stage3_engine.cpp), written once: which
// unit each module and parameter belongs to, and which parameters stay whole. The engine
// applies it to the finished model; zero::ShardedInit to each unit's subtree as construction
// finishes it (sharded_init.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/flat_group.h"

namespace zero {

struct UnitAssignment {
  /// The declared units in module pre-order: indices into ModelParameters::modules.
  std::vector<int> unit_modules;
  /// Per module: the unit it belongs to (its own when declared, else its parent's; -1 outside
  /// every unit), an index into unit_modules.
  std::vector<int> unit_of_module;
  /// Per parameter: the unit of the module that registers it first (-1: none).
  std::vector<int> home_unit;
  /// Per parameter: stays whole on every rank (outside every unit, or numel <=
  /// persistence_threshold while the running total of persistent elements stays <=
  /// model_persistence_cap, in registration order).
  std::vector<bool> persistent;
};

/// The rule over `collected` (collect_trainable_parameters). Pure apart from reading which
/// modules are declared units.
UnitAssignment assign_units(const ModelParameters& collected, int64_t persistence_threshold,
                            int64_t model_persistence_cap);

}  // namespace zero
