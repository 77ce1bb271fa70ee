#include "zero/sharded_init.h"

#include <torch/nn/module.h>

#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/flat_group.h"
#include "engine/param_storage.h"
#include "engine/unit_grouping.h"
#include "engine/unit_registry.h"
#include "zero/memory.h"
#include "zero/error.h"

namespace zero {

struct ShardedInit::State {
  Config config;
  std::shared_ptr<Communicator> comm;
  std::unordered_set<const void*> claimed;  // parameters already in some unit's partition
  std::optional<at::Device> device;          // where partitioned parameters go
  ShardedInit* previous = nullptr;
};

namespace {
thread_local ShardedInit::State* active = nullptr;
}  // namespace

ShardedInit::ShardedInit(const Config& config, std::shared_ptr<Communicator> comm,
                         std::optional<c10::Device> device)
    : state_(std::make_unique<State>()) {
  ZERO_CHECK(comm != nullptr, "zero::ShardedInit: communicator is null");
  validate_config(config);
  ZERO_CHECK(config.zero_optimization.stage == 3, config.source,
             ": zero::ShardedInit partitions parameters while the model is built, which is ZeRO ",
             "stage 3; zero_optimization.stage = ", config.zero_optimization.stage,
             " (allowed: 3)");
  ZERO_CHECK(config.world_size == comm->size(), config.source, ": the config was solved for ",
             "world size ", config.world_size, " but the communicator has ", comm->size(),
             " ranks");
  ZERO_CHECK(config.zero_optimization.stage3_model_persistence_threshold ==
                 std::numeric_limits<int64_t>::max(),
             config.source, ": zero_optimization.stage3_model_persistence_threshold = ",
             config.zero_optimization.stage3_model_persistence_threshold,
             " cannot be used with zero::ShardedInit (the model-wide cap depends on parameters ",
             "not built yet); allowed: the default (no cap)");
  ZERO_CHECK(active == nullptr, "zero::ShardedInit: another ShardedInit is already active on ",
             "this thread");
  state_->config = config;
  state_->comm = std::move(comm);
  state_->device = device;
  active = state_.get();
}

ShardedInit::~ShardedInit() { active = nullptr; }

void partition_declared_unit(torch::nn::Module& module) {
  ShardedInit::State* state = active;
  if (state == nullptr) return;
  // The unit's own partitioned parameters by the engine's grouping rule (unit_grouping.h)
  // applied to the unit's subtree, where the unit is unit 0 (first in pre-order): those whose
  // first registering module is in the unit but not inside a unit declared within it (already
  // partitioned), not persistent, and not claimed by a unit finished earlier in construction
  // (a parameter shared with it). The engine applies the same rule to the finished model and
  // checks that the two agree (stage3_engine.cpp).
  const int64_t threshold = state->config.zero_optimization.stage3_param_persistence_threshold;
  const ModelParameters collected = collect_trainable_parameters(module, /*require_some=*/false);
  // The model-wide cap is refused with ShardedInit (see the constructor).
  const UnitAssignment assignment =
      assign_units(collected, threshold, std::numeric_limits<int64_t>::max());
  std::vector<at::Tensor> params;
  for (size_t i = 0; i < collected.parameters.size(); ++i) {
    if (assignment.home_unit[i] != 0 || assignment.persistent[i]) continue;
    const at::Tensor& tensor = collected.parameters[i].tensor;
    if (!state->claimed.insert(tensor.unsafeGetTensorImpl()).second) continue;
    params.push_back(tensor);
  }
  if (params.empty()) return;
  auto unit = std::make_shared<PrepartitionedUnit>();
  unit->params = params;
  unit->dtype = state->config.param_dtype;
  unit->compute_dtype = state->config.compute_dtype;
  unit->world = state->comm->size();
  unit->persistence_threshold = threshold;
  unit->group = partition_parameters(params, unit->dtype, unit->compute_dtype, *state->comm,
                                     /*keep_whole=*/false, module.name(), state->device);
  store_prepartitioned(module, std::move(unit));
  release_freed_host_memory();  // the unit's full copy (zero/memory.h says why)
}

}  // namespace zero
